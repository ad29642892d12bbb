"""The modules of relax-build's compile driver (see main.py)."""

#!/usr/bin/env python3
"""Regenerates the hash locks of relax-build's managed toolchain.

Run it from the repository root after changing a pin in relax-build/src/versions.rs:

    python3 relax-build/locks/generate.py [toolchain.txt|torch.txt|tracker.txt ...]

(with file names, only those locks are written).

For every supported platform and CPython version it asks pip's resolver (with
--dry-run --report, nothing is installed) for the full set of packages the pins need,
transitive dependencies included, and writes
relax-build/locks/<platform>/cp<XY>/toolchain.txt (TVM and the rest of
`requirements()`), torch.txt (torch and its dependencies, installed on top of the
toolchain) and tracker.txt (tornado, which TVM's RPC tracker needs, likewise). Each line is `name==version --hash=sha256:...`, with the hash of every
wheel of that release on PyPI that fits the platform and Python version (so that pip
may choose, say, an older manylinux tag on an older glibc), as
`pip install --require-hashes --no-deps` needs. Packages always come from PyPI itself
(PIP_INDEX_URL, PIP_EXTRA_INDEX_URL and PIP_FIND_LINKS are ignored), so that a lock
never records a mirror's file.
"""

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from pip._vendor.packaging.tags import parse_tag
from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parent
VERSIONS = ROOT.parent / "src" / "versions.rs"
INDEX = "https://pypi.org/simple/"



def manylinux(arch):
    """pip expands no `manylinux_2_x` tag given to --platform, so list them (glibc 2.28 down)."""
    return [f"manylinux_2_{minor}_{arch}" for minor in range(28, 16, -1)] + [f"manylinux2014_{arch}"]


# relax-build's platform name -> (pip --platform tags for resolution, wheel platform test).
PLATFORMS = {
    "linux-x86_64": (manylinux("x86_64"), lambda p: p.startswith("manylinux") and p.endswith("_x86_64")),
    "linux-aarch64": (manylinux("aarch64"), lambda p: p.startswith("manylinux") and p.endswith("_aarch64")),
}
# No macOS lock: xgboost-cpu (a pin of the toolchain) has no macOS wheels.
# The CPython versions a managed toolchain may be made with (the bootstrap interpreter's).
PYTHONS = ["3.11", "3.12", "3.13", "3.14"]


def pins():
    """The pins of versions.rs: (toolchain requirements, {lock file: requirements installed
    on top of the toolchain})."""
    text = VERSIONS.read_text()
    constants = dict(re.findall(r'pub const (\w+): &str = "([^"]+)";', text))
    body = text[text.index("pub fn requirements()"):]
    body = body[: body.index("\n}\n")]
    expand = lambda spec: re.sub(r"\{(\w+)\}", lambda m: constants[m.group(1)], spec)
    toolchain = [expand(spec) for spec in re.findall(r'"([A-Za-z0-9_.-]+==[^"]+)"', body)]
    extras = {
        "torch.txt": [f"torch=={constants['TORCH_VERSION']}"],
        "tracker.txt": [f"tornado=={constants['TORNADO_VERSION']}"],
    }
    return toolchain, extras


def resolve(requirements, platform_tags, python):
    """pip's resolution: [(name, version, sha256 of the chosen wheel)]."""
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS")}
    with tempfile.TemporaryDirectory() as temp:
        report = Path(temp) / "report.json"
        command = [
            sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
            "--disable-pip-version-check", "--index-url", INDEX,
            "--only-binary=:all:", *(f"--platform={tag}" for tag in platform_tags), "--python-version", python,
            "--implementation", "cp", "--target", str(Path(temp) / "target"),
            "--report", str(report), *requirements,
        ]
        subprocess.run(command, check=True, env=env)
        installs = json.loads(report.read_text())["install"]
    return [
        (canonicalize_name(item["metadata"]["name"]), item["metadata"]["version"],
         item["download_info"]["archive_info"]["hashes"]["sha256"])
        for item in installs
    ]


@functools.lru_cache(maxsize=None)
def release_files(name):
    """Every release's files of a project on PyPI."""
    with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json") as response:
        return json.load(response)["releases"]


def fitting_hashes(name, version, python, fits_platform):
    """sha256 of every wheel of name==version on PyPI for this CPython and platform."""
    files = release_files(name)[version]
    cp = "cp" + python.replace(".", "")
    hashes = []
    for file in files:
        if not file["filename"].endswith(".whl"):
            continue
        _, _, _, tags = parse_wheel_filename(file["filename"])
        for tag in tags:
            interpreter_ok = tag.interpreter in (cp, "py3", "py" + python.replace(".", "")) or (
                tag.abi == "abi3" and tag.interpreter.startswith("cp3")
                and int(tag.interpreter[3:]) <= int(cp[3:]))
            abi_ok = tag.abi in (cp, "abi3", "none")
            platform_ok = tag.platform == "any" or fits_platform(tag.platform)
            if interpreter_ok and abi_ok and platform_ok:
                hashes.append(file["digests"]["sha256"])
                break
    return hashes


def write_lock(path, header, resolved, python, fits_platform):
    lines = [f"# {header}", "# Generated by relax-build/locks/generate.py; do not edit by hand."]
    for name, version, chosen in sorted(resolved):
        hashes = fitting_hashes(name, version, python, fits_platform)
        if chosen not in hashes:
            hashes.append(chosen)
        lines.append(f"{name}=={version} " + " ".join(f"--hash=sha256:{h}" for h in sorted(set(hashes))))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path.relative_to(ROOT.parent.parent)} ({len(resolved)} packages)")


def main():
    toolchain, extras = pins()
    wanted = set(sys.argv[1:]) or {"toolchain.txt", *extras}
    print("pins:", " ".join(toolchain), "|", " | ".join(" ".join(pins) for pins in extras.values()))
    for platform, (platform_tags, fits_platform) in PLATFORMS.items():
        for python in PYTHONS:
            folder = ROOT / platform / ("cp" + python.replace(".", ""))
            base = resolve(toolchain, platform_tags, python)
            if "toolchain.txt" in wanted:
                write_lock(folder / "toolchain.txt", f"{' '.join(toolchain)} for CPython {python} on {platform}",
                           base, python, fits_platform)
            for file_name, extra_pins in extras.items():
                if file_name not in wanted:
                    continue
                # Installed on top of the toolchain: the lock holds what the toolchain
                # lacks, resolved together with the toolchain's pins.
                together = resolve(toolchain + extra_pins, platform_tags, python)
                base_names = {(name, version) for name, version, _ in base}
                conflicts = {name for name, version, _ in together if name in {n for n, _ in base_names}
                             and (name, version) not in base_names}
                if conflicts:
                    sys.exit(f"{' '.join(extra_pins)} needs other versions of {sorted(conflicts)} than the "
                             f"toolchain on {platform} CPython {python}: pin them in versions.rs")
                extra = [item for item in together if (item[0], item[1]) not in base_names]
                write_lock(folder / file_name, f"{' '.join(extra_pins)} for CPython {python} on {platform} "
                           "(on top of toolchain.txt)", extra, python, fits_platform)


if __name__ == "__main__":
    main()

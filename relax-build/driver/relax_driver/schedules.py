"""Default CPU schedules for TIR functions without tuning records (TODO: issue 10)."""


def default_schedule_pass(target):
    import tvm

    return tvm.transform.Sequential([])

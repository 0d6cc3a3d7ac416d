"""Beat entries of this concern (merged by dashboard/schedule.py)."""


def schedule_entries():
    return {}

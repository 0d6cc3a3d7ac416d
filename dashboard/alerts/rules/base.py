"""The rule interface: a rule looks at one reading and returns findings for the subjects it covers."""


class Rule:
    key = ""
    title = ""
    severity = "warning"
    # What triggers evaluation: "engine_liveness", "engine_polled", "host_polled", "beat" or "external".
    signal = ""
    # Editable thresholds and durations (seconds); for_s is how long the condition must hold (pending).
    DEFAULTS: dict = {"for_s": 0}
    help = ""
    # False: the rule is off until someone turns it on (an AlertRule row with enabled=True).
    enabled_by_default = True

    def evaluate(self, *, settings, **context):
        """Return a list of dashboard.alerts.lifecycle.Finding (active or not) for this rule."""
        raise NotImplementedError

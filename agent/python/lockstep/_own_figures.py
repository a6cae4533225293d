"""The figures of the program's own, which lockstep.report() adds to the step in progress
(lockstep/__init__.py), kept until that step's end."""

from lockstep._step_report import _MAX_VALUE, _number


class _OwnFigures:
    """lockstep.report()'s figures for the step in progress: losses to average, the others by name."""

    def __init__(self, probe):
        self._probe = probe
        self._figures = {}
        self._losses = []

    def add(self, figures):
        for key, value in figures.items():
            if value is None:
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                self._probe.note_once("report:" + key, "lockstep.report(%s=...) ignored a value that is not a number: "
                                      "%r" % (key, value))
                continue
            if number != number or number in (float("inf"), float("-inf")) or abs(number) > _MAX_VALUE:
                self._probe.note_once("report:" + key, "lockstep.report(%s=...) ignores values that are not finite "
                                      "numbers within 1e30 (got %r)" % (key, value))
                continue
            if key == "loss":
                self._losses.append(number)
                continue
            if number < 0:
                self._probe.note_once("report:" + key, "lockstep.report(%s=...) ignores negative values (got %r)"
                                      % (key, value))
                continue
            if key == "step":
                if number != int(number) or number >= 2 ** 53:
                    self._probe.note_once("report:step", "lockstep.report(step=...) needs a whole number below 2**53 "
                                          "(got %r)" % (value,))
                    continue
                # The number of the step in progress; later steps count on from it.
                self._figures["step"] = int(number)
            elif key in ("tokens", "flops"):
                self._figures[key] = self._figures.get(key, 0) + number
            else:
                self._figures[key] = number

    def take_step(self):
        """The number lockstep.report(step=...) gave the step that ends now, or None."""
        return self._figures.pop("step", None) if self._figures else None

    def extras(self):
        """What lockstep.report() gave for the step that ends now, as report parts; None if nothing."""
        if not (self._losses or self._figures):
            return None
        parts = []
        if self._losses:
            parts.append("loss=%s" % _number(sum(self._losses) / len(self._losses)))
            self._losses = []
        if self._figures:
            for key in ("tokens", "flops", "total_steps"):
                if key in self._figures:
                    parts.append("%s=%s" % (key, _number(self._figures.pop(key))))
        return parts

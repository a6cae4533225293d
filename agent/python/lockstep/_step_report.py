"""One step's report line, as the probe sends it and the agent parses it (agent/step_report.hpp;
docs/metrics.md, "The step report")."""

_MAX_VALUE = 1e30  # agent/step_report.hpp: kMaxReportValue


def _format(record):
    """One step's report line: record = [step, step_s or None, communication or None, extra parts or None],
    communication as DDP's source gives it (a tuple) or per op ({op: {"comm_s"[, "exposed_s"][, "bytes"]}})."""
    # Times with 9 significant digits (1 ns in a second): "%.9g" costs half of repr()'s shortest
    # round trip, and rounding keeps order, so exposed <= comm holds in the text too.
    step, step_s, comm, extras = record
    parts = ["step=%d" % step]
    if step_s is not None:
        parts.append("step_s=%.9g" % step_s)
    if type(comm) is tuple:  # DDP's all-reduce, the usual case, straight from its tuple
        total, exposed, nbytes = comm
        total_text = "%.9g" % total
        exposed_text = "%.9g" % exposed
        if step_s is not None:
            parts.append("compute_s=%.9g" % max(0.0, step_s - exposed))
        parts.append("comm_s=" + total_text)
        parts.append("exposed_comm_s=" + exposed_text)
        parts.append("comm_s.allreduce=" + total_text)
        parts.append("exposed_comm_s.allreduce=" + exposed_text)
        if nbytes is not None:
            parts.append("comm_bytes.allreduce=%d" % nbytes)
    elif comm:  # per op: FSDP's, or DDP's with FSDP's
        total = exposed = 0.0
        all_exposed = True
        for values in comm.values():
            total += values["comm_s"]
            if "exposed_s" in values:
                exposed += values["exposed_s"]
            else:
                all_exposed = False
        if all_exposed:
            if step_s is not None:
                parts.append("compute_s=%.9g" % max(0.0, step_s - exposed))
            parts.append("comm_s=%.9g" % total)
            parts.append("exposed_comm_s=%.9g" % exposed)
        else:  # Note [FSDP2's collectives]: an asynchronous all-gather's exposed part is unknown
            parts.append("comm_s=%.9g" % total)
        for op in sorted(comm):
            values = comm[op]
            parts.append("comm_s.%s=%.9g" % (op, values["comm_s"]))
            if "exposed_s" in values:
                parts.append("exposed_comm_s.%s=%.9g" % (op, values["exposed_s"]))
            if "bytes" in values:
                parts.append("comm_bytes.%s=%s" % (op, _number(values["bytes"])))
    if extras:
        parts.extend(extras)
    # A sum of reported figures could pass the protocol's bound; one such value would make
    # the agent reject the whole report, so it alone is left out. (Times are far below it.)
    line = " ".join(parts)
    if "e+" in line:
        line = " ".join(part for part in parts if abs(float(part.split("=", 1)[1])) <= _MAX_VALUE)
    return line


def _number(value):
    if isinstance(value, int):
        return str(value)
    if float(value).is_integer() and abs(value) < 2 ** 53:
        return str(int(value))
    return repr(float(value))

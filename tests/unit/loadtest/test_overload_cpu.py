"""Who had the CPU during a phase of the overload, from readings of /proc: the stack, the load generator, others,
steal and idle, and what the stack could have used."""

import os

import pytest

from loadtest.overload.cpu import CpuReading, cpu_limit, parse_proc_stat, phase_cpu, read


def reading(when: float, stack: float, harness: float, **machine: float) -> CpuReading:
    kinds = dict.fromkeys(("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"), 0.0)
    return CpuReading(when=when, stack=stack, front=stack / 2, harness=harness, machine=kinds | machine)


def test_who_had_the_cpu_between_two_readings():
    start = reading(100.0, stack=50.0, harness=5.0, user=1000.0, idle=500.0, steal=10.0)
    # 10 s on 2 CPUs: 20 CPU-s = 9 busy in user, 4 in system, 1 in softirq, 4 idle, 1 iowait, 1 steal
    end = reading(
        110.0, stack=59.2, harness=8.0, user=1009.0, system=4.0, softirq=1.0, idle=504.0, iowait=1.0, steal=11.0
    )
    phase = phase_cpu(start, end, limit=2.0)
    assert phase.seconds == pytest.approx(10.0)
    assert phase.stack == pytest.approx(0.92) and phase.harness == pytest.approx(0.3)
    assert phase.others == pytest.approx(1.4 - 0.92 - 0.3), "busy minus the stack and the generator"
    assert phase.steal == pytest.approx(0.1) and phase.idle == pytest.approx(0.5)
    assert phase.available == pytest.approx(1.42), "what the stack used plus what sat idle"
    assert phase_cpu(start, reading(110.0, 70.0, 5.0, user=1000.0, idle=520.0, steal=10.0), 2.0).available == 2.0


def test_proc_stat_is_read_per_kind_and_the_limit_is_this_machines():
    ticks = os.sysconf("SC_CLK_TCK")
    text = f"cpu  {3 * ticks} 0 {ticks} {5 * ticks} 0 0 0 {2 * ticks} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n"
    assert parse_proc_stat(text) == {
        "user": 3.0,
        "nice": 0.0,
        "system": 1.0,
        "idle": 5.0,
        "iowait": 0.0,
        "irq": 0.0,
        "softirq": 0.0,
        "steal": 2.0,
    }
    assert parse_proc_stat("cpu  1 2 3 4\n")["steal"] == 0.0, "old kernels have fewer columns"
    assert 0 < cpu_limit() <= len(os.sched_getaffinity(0))


def test_a_reading_sums_the_stack_and_this_process():
    class Stack:
        def cpu_seconds(self) -> tuple[float, float]:
            return 12.5, 4.0

    first, second = read(Stack()), read(Stack())
    assert (first.stack, first.front) == (12.5, 4.0) and second.when >= first.when
    assert second.harness >= first.harness > 0 and second.machine["idle"] >= first.machine["idle"]

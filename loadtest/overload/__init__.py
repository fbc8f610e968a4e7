"""`loadtest overload` and `loadtest soak`: what a stack does past its capacity, and over a long run below it.

Overload: bring the stack up, measure its saturated rate (closed loop), attack it open loop at FACTOR x that rate,
then measure again right after. The verdicts are the ones production asks for: only 2xx, 429 and 503 come back (the
refusals with Retry-After), the admitted requests' p99 stays bounded, goodput (2xx per second) during the overload
holds against the saturated rate, every server process's resident memory stays within a band of its value once the
attack has settled, and full throughput is back within seconds of the attack's end. Goodput and p99 are judged
against the CPU the stack could use in each phase (on a shared machine its neighbours may take most of it).

Soak: the same stack at a fraction of its saturated rate for a long time; errors, latency and memory over time, as a
chart.

- `config`: the phases, their lengths and the bar that passes;
- `sampling`: memory sampled during an attack, figures from the results (recovery time, timeline);
- `cpu`: who had the CPU during a phase (the stack, the load generator, others, steal, idle) and the stack's shares;
- `phases`: the overload and soak attacks against a running stack;
- `judge`: the overload's figures and verdicts;
- `report`: report.md;
- `run`: the whole test against a fresh stack (what the CLI calls).
"""

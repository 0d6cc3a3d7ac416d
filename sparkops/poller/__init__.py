"""The resident poller: what each `sparkops worker` does every second for its box's engines.

- `resident.py`: the `ResidentPoller`, its threads and their duties (metrics, probes, launch,
  the leader's upkeep), and what it keeps between ticks;
- `entrypoints.py`: how one is run (the worker's bootstep, `poll --once`);
- `fleet.py`: which engines a poller owns and which poller leads; `lease.py`: one poller a box;
- `fetch.py`: what a tick reads; `reading.py`: the reading derived from it; `pending.py`: the
  rows held between stores and the store; `liveness.py`: the probes;
- `exitwatch.py`: the pidfds and the journal follower that see a death at once; `exits.py`:
  what the poller does when they do."""

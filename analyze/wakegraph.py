"""The wake graph: causal waker -> wakee edges, and the chains they form.

Problem: sched_waking is charged to the thread that was on the CPU when the
wakeup happened. For a futex or pipe wakeup that is the real waker, but a
timer or device interrupt lands on whoever happened to be running: a
spinner "wakes" every sleeper that shares its CPU. Chains (A wakes B wakes
C) must be built from causal edges only, or every hot thread heads a chain.
Approach: compare an edge's share of the wakee's wakeups with the share a
bystander would get by chance: an interrupt on the wakee's CPU lands on the
waker about as often as the waker holds that CPU, bounded by its share of its
busiest CPU (max per-CPU cpu_ns / duration). The ratio is the edge's *lift*.
A thread that holds its CPU all the time cannot be told from a bystander by
this test; a *spinner* (runnable nearly all its life, almost never sleeping,
`spinners`) is never taken for a waker: on a quiet host it holds its CPU
whenever a sleeper's timer fires there, so it "wakes" nearly all of that
sleeper's wakeups, and under CPU steal its share falls while interrupts keep
landing on it. (A spinning producer that signals consumers is missed: the
price of not seeing hardirq context in sched_waking.) An edge is
causal when it carries enough wakeups (`min_wakeups`, `min_rate`), a real
part of the wakee's wakeups (`min_share`), and a lift of at least
`min_lift`.

Pools: a pool of CPU-busy producers feeding one consumer through a queue
fails every per-thread test (each member is a spinner by the rule above,
holds a third of the wakeups, and its lift is the chance any busy thread
has). So wakers are also judged by pattern group (`pattern_of`, the
workload's own threads): the members of one group together wake a thread
of another group (`judged_by = "pool"`) when two or more members carry at
least `pool_min_share` of its wakeups at `pool_min_rate` or more, and the
wakee is not a periodic sleeper (the CV of the gaps between its wakeups,
`wake_gap_cv`, >= `pool_min_cv`): timer wakeups that land on a busy pool
arrive at the timer's period, a queue's wakeups arrive when the producers
finish work.

Chains are the simple paths of the causal graph (depth-limited,
cycles cut; a chain inside a longer one is kept only when it carries more
than twice the longer one's rate) that wake at least one target thread,
ranked by their bottleneck
rate (the slowest edge); their compound latency adds the edges' wake-to-run
latencies.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

EDGE_SCHEMA = {"waker_utid": pl.Int64, "wakee_utid": pl.Int64, "waker": pl.String, "wakee": pl.String,
               "waker_process": pl.String, "wakee_process": pl.String, "waker_is_target": pl.Boolean,
               "wakee_is_target": pl.Boolean, "wakeups": pl.Int64, "wakeups_per_s": pl.Float64,
               "share_of_wakee": pl.Float64, "lift": pl.Float64, "latency_p50_ns": pl.Int64,
               "latency_p99_ns": pl.Int64, "causal": pl.Boolean, "judged_by": pl.String}
CHAIN_SCHEMA = {"chain_id": pl.Int64, "utids": pl.List(pl.Int64), "names": pl.List(pl.String),
                "patterns": pl.List(pl.String), "length": pl.Int64, "rate_per_s": pl.Float64,
                "latency_p50_ns": pl.Int64, "latency_p99_ns": pl.Int64, "busiest": pl.Boolean}


@dataclass(frozen=True)
class WakeParams:
    min_wakeups: int = 5
    min_rate: float = 1.0          # wakeups per second
    min_share: float = 0.1         # of the wakee's wakeups
    min_lift: float = 2.0
    max_depth: int = 6             # nodes per chain
    max_chains: int = 500
    busiest: int = 5               # chains whose members count as "in a wake chain"
    busiest_min_rate: float = 10.0
    pool_min_members: int = 2      # wakers of one pattern group that share the wakee's wakeups
    pool_min_share: float = 0.5    # of the wakee's wakeups, all members together
    pool_min_rate: float = 10.0    # wakeups per second, all members together
    pool_min_cv: float = 0.5       # wakee's wake_gap_cv: below this it sleeps on a timer


def classify_edges(edges: pl.DataFrame, names: pl.DataFrame, *, duration_ns: int,
                   spinners: frozenset[int] = frozenset(), params: WakeParams = WakeParams(),
                   pattern_of: dict[int, str] | None = None,
                   wake_cv: dict[int, float | None] | None = None) -> pl.DataFrame:
    """Edges with names, rates, lift, the causal flag and what judged it (EDGE_SCHEMA).

    `pattern_of` (utid -> name pattern of the workload's threads) and `wake_cv` (utid ->
    wake-interval CV) turn on the pool judgment (module note).
    """
    if edges.is_empty() or duration_ns <= 0:
        return pl.DataFrame(schema=EDGE_SCHEMA)
    capacity = float(duration_ns)
    info = names.select("utid", "name", "process_name", "is_target", "max_cpu_ns")
    out = (edges
           .join(info.rename({"utid": "waker_utid", "name": "waker", "process_name": "waker_process",
                              "is_target": "waker_is_target", "max_cpu_ns": "waker_cpu_ns"}),
                 on="waker_utid", how="left")
           .join(info.rename({"utid": "wakee_utid", "name": "wakee", "process_name": "wakee_process",
                              "is_target": "wakee_is_target"}).drop("max_cpu_ns"),
                 on="wakee_utid", how="left")
           .with_columns(
               wakeups_per_s=pl.col("wakeups") * 1e9 / duration_ns,
               share_of_wakee=pl.col("wakeups") / pl.col("wakee_wakeups").cast(pl.Float64),
               chance=(pl.col("waker_cpu_ns").fill_null(0).cast(pl.Float64) / capacity).clip(1e-6, 1.0))
           .with_columns(lift=pl.col("share_of_wakee") / pl.col("chance"))
           .with_columns(causal=(pl.col("wakeups") >= params.min_wakeups)
                         & (pl.col("wakeups_per_s") >= params.min_rate)
                         & (pl.col("share_of_wakee") >= params.min_share)
                         & (pl.col("lift") >= params.min_lift)
                         & ~pl.col("waker_utid").is_in(list(spinners))
                         & (pl.col("waker_utid") != pl.col("wakee_utid"))))
    out = out.with_columns(judged_by=pl.when(pl.col("causal")).then(pl.lit("thread"))
                           .otherwise(pl.lit(None, pl.String)))
    if pattern_of:
        out = _judge_pools(out, pattern_of, wake_cv or {}, duration_ns, params)
    return (out.select(list(EDGE_SCHEMA)).cast(EDGE_SCHEMA)  # type: ignore[arg-type]
            .sort(["causal", "wakeups", "waker_utid", "wakee_utid"], descending=[True, True, False, False]))


def _judge_pools(out: pl.DataFrame, pattern_of: dict[int, str], wake_cv: dict[int, float | None],
                 duration_ns: int, params: WakeParams) -> pl.DataFrame:
    """Mark the edges of pattern groups that together wake a non-periodic thread (module note)."""
    tagged = out.with_columns(
        waker_pattern=pl.col("waker_utid").replace_strict(pattern_of, default=None, return_dtype=pl.String),
        wakee_pattern=pl.col("wakee_utid").replace_strict(pattern_of, default=None, return_dtype=pl.String),
        wakee_cv=pl.col("wakee_utid").replace_strict(wake_cv, default=None, return_dtype=pl.Float64))
    candidates = tagged.filter(
        pl.col("waker_pattern").is_not_null() & (pl.col("waker_utid") != pl.col("wakee_utid"))
        & (pl.col("wakee_pattern").is_null() | (pl.col("wakee_pattern") != pl.col("waker_pattern"))))
    if candidates.is_empty():
        return out
    pools = (candidates.group_by("waker_pattern", "wakee_utid")
             .agg(members=pl.col("waker_utid").n_unique(), pool_wakeups=pl.col("wakeups").sum(),
                  pool_share=pl.col("share_of_wakee").sum(), wakee_cv=pl.col("wakee_cv").first())
             .filter((pl.col("members") >= params.pool_min_members)
                     & (pl.col("pool_wakeups") >= params.min_wakeups)
                     & (pl.col("pool_wakeups") * 1e9 / duration_ns >= params.pool_min_rate)
                     & (pl.col("pool_share") >= params.pool_min_share)
                     & (pl.col("wakee_cv").fill_null(0.0) >= params.pool_min_cv))
             .select("waker_pattern", "wakee_utid", pool=pl.lit(True)))
    if pools.is_empty():
        return out
    judged = (tagged.join(pools, on=["waker_pattern", "wakee_utid"], how="left")
              .with_columns(pool=pl.col("pool").fill_null(False)
                            & (pl.col("waker_utid") != pl.col("wakee_utid")))
              .with_columns(judged_by=pl.when(pl.col("causal")).then(pl.col("judged_by"))
                            .when(pl.col("pool")).then(pl.lit("pool"))
                            .otherwise(pl.lit(None, pl.String)),
                            causal=pl.col("causal") | pl.col("pool")))
    return judged.drop("waker_pattern", "wakee_pattern", "wakee_cv", "pool")


def find_chains(edges: pl.DataFrame, pattern_of: dict[int, str], *,
                params: WakeParams = WakeParams()) -> pl.DataFrame:
    """Simple paths of >= 2 threads over causal edges, busiest (bottleneck rate) first."""
    causal = edges.filter(pl.col("causal"))
    if causal.is_empty():
        return pl.DataFrame(schema=CHAIN_SCHEMA)
    out_edges: dict[int, list[tuple[int, float, int, int]]] = {}
    name: dict[int, str] = {}
    targets = set(causal.filter(pl.col("wakee_is_target"))["wakee_utid"].to_list())
    for row in causal.iter_rows(named=True):
        out_edges.setdefault(row["waker_utid"], []).append(
            (row["wakee_utid"], row["wakeups_per_s"], row["latency_p50_ns"] or 0, row["latency_p99_ns"] or 0))
        name[row["waker_utid"]], name[row["wakee_utid"]] = row["waker"] or "?", row["wakee"] or "?"
    for outs in out_edges.values():
        outs.sort(key=lambda e: (-e[1], e[0]))
    # Walk from every node (cycles have no natural head) and collect every path, then drop a
    # path that lies inside a longer one carrying at least half its rate: server -> io goes
    # inside client -> server -> io, but client -> server at 700/s stays beside it at 100/s.
    paths: list[tuple[list[int], float, int, int]] = []

    def walk(path: list[int], rate: float, p50: int, p99: int) -> None:
        # Only chains that wake a target thread matter to its profile (a target waking
        # only other processes' threads is usually an interrupt landing on it).
        if len(path) >= 2 and any(u in targets for u in path[1:]):
            paths.append((path, rate, p50, p99))
        if len(path) < params.max_depth:
            for nxt, r, l50, l99 in out_edges.get(path[-1], []):
                if nxt not in path and len(paths) < params.max_chains:
                    walk([*path, nxt], min(rate, r), p50 + l50, p99 + l99)

    for node in sorted(out_edges):
        walk([node], float("inf"), 0, 0)
    paths = [p for p in paths if not any(len(q[0]) > len(p[0]) and q[1] >= p[1] / 2 and _inside(p[0], q[0])
                                         for q in paths)]
    paths.sort(key=lambda p: (-p[1], p[0]))
    # "Busiest" is decided per pattern sequence (feeder -> worker-*), summing its threads' chains,
    # so sixteen identical worker chains count once and all of them.
    keys = [tuple(pattern_of.get(u, name[u]) for u in p[0]) for p in paths]
    totals: dict[tuple[str, ...], float] = {}
    for key, path in zip(keys, paths, strict=True):
        totals[key] = totals.get(key, 0.0) + path[1]
    ranked = sorted(totals, key=lambda k: (-totals[k], k))
    top = {k for k in ranked[:params.busiest] if totals[k] >= params.busiest_min_rate}
    rows = [{"chain_id": i, "utids": p, "names": [name[u] for u in p], "patterns": list(key),
             "length": len(p), "rate_per_s": rate, "latency_p50_ns": l50, "latency_p99_ns": l99,
             "busiest": key in top}
            for i, ((p, rate, l50, l99), key) in enumerate(zip(paths, keys, strict=True))]
    return pl.DataFrame(rows, schema=CHAIN_SCHEMA)


def pattern_chains(chains: pl.DataFrame) -> pl.DataFrame:
    """Chains summed per pattern sequence: what a reader (and a profile) cares about."""
    if chains.is_empty():
        return pl.DataFrame(schema={"patterns": pl.List(pl.String), "threads_chains": pl.Int64,
                                    "rate_per_s": pl.Float64, "latency_p50_ns": pl.Int64,
                                    "latency_p99_ns": pl.Int64, "busiest": pl.Boolean})
    return (chains.group_by("patterns", maintain_order=True)
            .agg(threads_chains=pl.len().cast(pl.Int64), rate_per_s=pl.col("rate_per_s").sum(),
                 latency_p50_ns=pl.col("latency_p50_ns").median().cast(pl.Int64),
                 latency_p99_ns=pl.col("latency_p99_ns").max(), busiest=pl.col("busiest").any())
            .sort(["rate_per_s"], descending=True, maintain_order=True))


def _inside(short: list[int], long: list[int]) -> bool:
    """`short` occurs as a contiguous run in `long`."""
    n = len(short)
    return any(long[i:i + n] == short for i in range(len(long) - n + 1))


def chain_members(chains: pl.DataFrame) -> set[int]:
    """utids in any of the busiest chains."""
    if chains.is_empty():
        return set()
    return set(chains.filter(pl.col("busiest")).explode("utids")["utids"].to_list())

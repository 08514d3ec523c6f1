//! Command-line arguments of `clarion-lab`: parsing only. Each command's
//! flags live beside its work (`gen.rs`, `bench.rs`, `dos.rs`,
//! `feasibility.rs`); its examples and notes are here.

use clap::{Parser, Subcommand};
pub use clarion_cmdline::parse_duration;

const ABOUT: &str = "Clarion lab: the research harness, apart from the clarion binary.

It measures the monitor on Trumpet's evaluation workload (SIGCOMM'16):
the benchmark on one pinned core, the feasibility region, and the DoS
filter's cost model against the paper's attacks; and it writes that
workload as a capture file for `clarion run`.";

const AFTER_HELP: &str = "Examples:
  Measure the monitor on Trumpet's workload (4,096 triggers, 300 flows, 64 B):
    clarion-lab bench --packets 5000000 --json

  Find the feasibility region (Trumpet's Figure 13) as CSV and PNG:
    clarion-lab feasibility --csv feasibility.csv --png feasibility.png

  Profile the DoS cost model and bench the SYN and threshold attacks:
    clarion-lab dos

  Write the workload and its events, then monitor them with the product binary:
    clarion-lab gen --out bench.pcap --events-out bench.clarion
    clarion run --pcap bench.pcap --events bench.clarion --format json

Exit status: 0 ok, 1 runtime failure (write error, a measured loop that
failed, a missed or wrong event, an unmonitored flow), 2 bad usage.
Method and results: docs/performance.md.";

#[derive(Parser, Debug)]
#[command(name = "clarion-lab", version, about = ABOUT, after_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write the benchmark workload (Trumpet's evaluation traffic) as a pcap file.
    #[command(after_help = GEN_AFTER_HELP)]
    Gen(crate::gen::GenArgs),
    /// Measure the monitor on one pinned core over the benchmark workload held in memory.
    #[command(after_help = BENCH_AFTER_HELP)]
    Bench(crate::bench::BenchArgs),
    /// Find the highest packet rate with no late sweep over a grid of triggers per flow,
    /// intervals, active flows and arrival rates (Trumpet's feasibility region, Figure 13).
    #[command(after_help = FEASIBILITY_AFTER_HELP)]
    Feasibility(crate::feasibility::FeasibilityArgs),
    /// Profile the DoS filter's cost model on this machine and bench the paper's two
    /// attacks (SYN, threshold) over attack fractions: model vs measured breaking point.
    #[command(after_help = DOS_AFTER_HELP)]
    Dos(crate::dos::DosArgs),
    /// Compare the export classifier's fast paths on ClassBench-style rule sets:
    /// Trident's USS + uniflows against OVS's TSS + megaflows (Trident's Table 2, Fig. 6).
    #[command(after_help = CLASSIFY_AFTER_HELP)]
    Classify(crate::classify::ClassifyArgs),
    /// Measure what export policies cost (headers to a collector, pcapng files, a VXLAN
    /// mirror, headers of a fraction) against the monitor alone, on a capture looped and paced.
    #[command(after_help = EXPORT_COST_AFTER_HELP)]
    ExportCost(crate::export_cost::ExportCostArgs),
    /// Thrash the shared cache beside the monitor (MONA's co-runner): a dependent chain
    /// of random reads over a buffer several times the L3; prints accesses/s at the end.
    #[command(after_help = THRASH_AFTER_HELP)]
    Thrash(crate::thrash::ThrashArgs),
    /// MONA's overload experiments: the capture looped at a sine or constant rate into a
    /// bounded ring, the monitor static or adapting each window, in simulated time.
    #[command(after_help = OVERLOAD_AFTER_HELP)]
    Overload(crate::overload::OverloadArgs),
    /// MONA's offline profiling: degraded mode's per-state costs (lookup hit and miss,
    /// update per word, TCP state, sweep pair, insertion) fitted, and checked on mixed states.
    #[command(after_help = PROFILE_STATES_AFTER_HELP)]
    ProfileStates(crate::profile_states::ProfileStatesArgs),
    /// The network-wide event manager under a simulated fleet over a real NATS server:
    /// thousands of agents' satisfaction reports, polls and decisions, against a reference.
    #[command(after_help = FLEET_AFTER_HELP)]
    Fleet(crate::fleet::FleetArgs),
    /// The manager a `fleet` run starts (its NATS service in a process of its own).
    #[command(hide = true)]
    FleetManager(crate::fleet::FleetManagerArgs),
}

const FLEET_AFTER_HELP: &str = "Examples:
  clarion-lab fleet                                   # 1,000 hosts, 100 events, 10 s
  clarion-lab fleet --hosts 10000 --events 1000 --duration 20s --json
  clarion-lab fleet --hosts 10000 --events 1000 --shared 1 && clarion-lab fleet --hosts 10000 --events 1000 --shared 2

It starts nats-server (JetStream on, in a temporary directory; on PATH or
/usr/sbin) on a free loopback port unless --nats, the manager(s) as child
processes (their pids printed, for perf record -p), registers every host,
then for --duration each host sends the satisfaction reports of the
seeded workload as its windows end and answers the manager's polls. The
fired decisions received on clarion.events are compared with the
workload's reference. Exit status 1 if one is wrong or missing, or the
manager polled a host the model does not place the event on.
Method and results: docs/performance.md (Fleet scale).";

const PROFILE_STATES_AFTER_HELP: &str = "Examples:
  clarion-lab profile-states
  clarion-lab profile-states --flows 200000 --packets 500000 --repeat 3 --json

Generated packets in memory, the monitor in degraded mode, each figure the
median of --repeat timed epochs. The fitted StateCosts are printed beside
the current defaults, then the check: measured wall time per epoch (its
packets and its sweep) over epoch_load's predicted time, for mixed states
at three sheddings. Method: crates/lab/src/profile_states.rs; results:
docs/performance.md.";

const OVERLOAD_AFTER_HELP: &str = "Examples:
  clarion-lab overload --pcap examples/demo.pcap --events crates/lab/tests/mona_chain.clarion
  clarion-lab overload --pcap ../shared/captures/pathspider_real.pcap \\
      --events crates/lab/tests/mona_chain.clarion --period 100ms --mode both --json

Time is simulated: a packet's service time is the monitor's predicted
time for it (degraded mode's cost model), so the figures are the same on
every machine and every run. The sustainable rate is where the static
monitor's mean predicted time equals the inter-arrival time; --mean-load
1 with --amplitude 1 is MONA's sine from 0 to twice it. Per mode: drops,
windows with drops and with a negative packet balance, the shed depth,
and per event the satisfaction (share of windows whose true recall, from
the reference evaluator over every arrived packet, is at least 75%) and
the mean |estimated - true| recall. --json adds the per-window table.
Method and results: docs/performance.md.";

const THRASH_AFTER_HELP: &str = "Examples:
  clarion-lab thrash --bytes 64MiB --seconds 10
  clarion-lab thrash --bytes 256MiB --threads 3 --seconds 30 --json &

Each thread follows one random cycle through its own buffer, a line at a
time, the next address being the value just read: nearly every access
misses the L3 when the buffer is well over it (a warning says when it is
not). It stops at --seconds, or at SIGINT or SIGTERM, then prints the
accesses per second over all threads (JSON with --json) and exits 0.
\"clarion-lab thrash: chasing\" on standard error says the buffers are built.";

const EXPORT_COST_AFTER_HELP: &str = "Examples:
  clarion-lab export-cost --pcap ../shared/captures/pathspider_real.pcap --rate 200000 --seconds 5
  clarion-lab export-cost --pcap examples/demo.pcap --rate 50000 --seconds 1 --variants headers --json

Columns (medians over rounds): exported = packets the policy took;
delivered = header records decoded, VXLAN frames received or packets read
back from the files; cores = CPU time (user + system) of the replay thread
over its wall time; need = CPU ns a packet times --rate (the cores the
rate needs: equal to cores when the rate was sustained); ratio = CPU over the monitor alone's in the same
round; +cores = cores over the monitor alone's; ns/exported = (CPU - CPU
of the monitor alone) / exported; rx_cores = the receiver thread's (not
counted in cores); hit_rate and lk/pkt = the classifier's fast path.
Method and results: docs/performance.md.";

const CLASSIFY_AFTER_HELP: &str = "Examples:
  clarion-lab classify                          # ACL and FW, 100/1,000/10,000 rules, 1M packets
  clarion-lab classify --rules acl --sizes 1000 --cache 100 --packets 200000
  clarion-lab classify --no-locality --json
  clarion-lab classify --warm --rules acl --sizes 100  # fast paths alone, 100% hits

full uss: the uniflows of the full USS table (Trident's Algorithms 1-3,
no slow path), or >4M when it would not fit in 4 Mi uniflows.
Columns per fast path: hash lookups per packet on the fast path (lk/p),
fast-path hit rate, mean log2 of the packets a cached entry covers (sp2,
Trident's Fig. 6), million packets per second (median of --runs passes,
each with an empty cache, the two fast paths' passes alternating) and
nanoseconds per packet; ratio = USS packets/s over megaflow packets/s, measured in
the same run. With --warm, each pass first fills the cache with the
trace's first --cache distinct headers, untimed, and the columns describe
the timed packets only (all hits). Both answers are compared packet by packet (exit 1 if they
ever differ). Method and results: docs/performance.md.";

const GEN_AFTER_HELP: &str = "Examples:
  clarion-lab gen --out bench.pcap --events-out bench.clarion
  clarion-lab gen --out dos.pcap --packets 200000 --dos-fraction 0.9 --seed 7
  clarion-lab gen --out dc.pcap --flows 1000000 --arrival 100000 --flow-sizes pareto:1.2
  clarion run --pcap bench.pcap --events bench.clarion --format json

The same seed and flags give the same bytes (--flow-sizes uniform, the
default, gives the bytes of before the flag existed). Five-tuples are
unique for the first 2,064,384 flows of a run (active at the start plus
arrivals). Every packet matches exactly
--per-packet of the synthesized triggers, which use exactly --patterns
filter patterns (crates/workload/src/layout.rs explains the construction).";

const BENCH_AFTER_HELP: &str = "Examples:
  clarion-lab bench
  clarion-lab bench --packets 5000000 --rate 30000000 --json
  clarion-lab bench --triggers 16384 --per-packet 16 --core 1
  clarion-lab bench --flows 1000000 --arrival 100000 --flow-sizes pareto:1.2
  clarion-lab bench --no-opt batch-prefetch,sweep-prefetch
  clarion-lab bench --ablation --packets 2000000 --rounds 5
  clarion-lab bench --pcap examples/demo.pcap --events examples/demo.clarion --runs 5
  clarion-lab bench --pcap examples/demo.pcap --runs 9 --records --gpv

With --pcap, the capture is read into memory and `clarion run`'s file path
(clarion_host::replay into the monitor, or --workers N, with --events
installed as `clarion run` does, reports counted and dropped) is timed
against the capture reader alone and reading plus parsing, in alternating
rounds (--runs): ns/packet, packets/s, and the file path's ratio to the
read + parse floor. With --records and --gpv, the file path is also timed
with a flow meter (records kept in memory) and with a GPV cache (GPVs
dropped) beside the monitor, in the same rounds, and their ratios to the
monitor alone given. The table goes to stdout (stderr with --json).

Frames are generated into memory first (not timed); the timed loop parses
each batch of frames and processes it, and runs each epoch's sweep when it
is due, timed apart. The summary also gives the flows tracked at the end
and the monitor's resident memory (the process's RSS after the run less
its RSS before the monitor was made, the workload already in memory; in
the JSON under memory), and warns if a full flow table left packets
untracked. The summary goes to standard error, the JSON object
(--json) to standard output. The reports of the first --verify-prefix
packets are compared with the reference evaluator: any difference exits 1.

Optimizations (--no-opt switches them off; none changes a result):
  batch-prefetch  process each batch in passes that prefetch flow slots,
                  entries and statistics before any packet is processed
  header-prefetch the loop prefetches each frame's header 32 frames before
                  parsing it, as a NIC poll loop prefetches its next burst
  sweep-prefetch  prefetch trigger data and epoch logs ahead in the sweep
                  (sets ahead, and records ahead in a set's log)
  last-flow       a packet of the previous packet's flow skips the lookup
  huge-pages      transparent huge pages for flow table, statistics, triggers
  active-sweep    sweep only triggers whose flows had packets in the epoch
  flow-windows    one-epoch per-5-tuple windows with only aggregates are
                  tested flow by flow in the gather, with no window kept
  prefault        memory committed before traffic (the flow table, and
                  32 MiB of heap the monitor grows into): no page faults
  match-cache     a new flow's matched set is found by the key bits that
                  filters read, before the tuple-space search
--ablation measures each: all on, each off in turn, all off, interleaved
over --rounds rounds; the table (stdout, or stderr with --json) gives each
one's throughput ratio to all off and all on's ratio to it.";

const FEASIBILITY_AFTER_HELP: &str = "Examples:
  clarion-lab feasibility --csv docs/feasibility.csv --png docs/feasibility.png
  clarion-lab feasibility --per-flow 8 --intervals 10 --flows 300
  clarion-lab feasibility --quick --csv /tmp/f.csv --png /tmp/f.png
  clarion-lab feasibility --per-flow 8 --intervals 10 --flows 300,100000,1000000 \
      --arrivals 1000,100000 --flow-sizes pareto:1.2      # towards data centers
  clarion-lab feasibility --from-csv docs/feasibility-scale.csv --png /tmp/f.png   # redraw

One K over several flow counts is drawn with the flows on the x axis, one
panel per interval and one line per arrival rate.

Each point is measured with `clarion-lab bench`'s loop on one pinned core: the
mean ns per packet p and the p99 sweep time S. The highest rate R with
R*I*p + S <= I (I the interval, one epoch) is then verified by a run at
0.95*R in which no epoch may be over budget, stepping down 10% at most
three times. Progress goes to standard error; the CSV to --csv or standard
output. The plot's text needs a TrueType font (CLARION_FONT or DejaVu Sans).
Method and results: docs/performance.md.";

const DOS_AFTER_HELP: &str = "Examples:
  clarion-lab dos                               # both attacks, 5 thresholds, 10 fractions (~2 minutes)
  clarion-lab dos --model-only                  # the profiled costs and the thresholds they imply
  clarion-lab dos --attacks threshold --thresholds 384,832 --rate 4000000
  clarion-lab dos --size 1514 --rate 8800000 --thresholds 832 --fractions 0.96
                                                # the paper's run: 10 Gb/s, 96 % attack packets
  clarion-lab dos --quick                       # a tiny run (the test)
  clarion-lab bench --dos-fraction 0.96 --dos-threshold 832 --rate 14880000

The DoS filter (--dos-threshold of bench and run) keeps a new flow out of
the flow table, unmatched, until it has sent more than the threshold of
bytes (IP length) within one epoch. First the four costs of the paper's
model (Trumpet, SIGCOMM'16, Eq. 1-4) are profiled here with bench's loop:
Tp per filtered packet, Update per packet of a known flow, Match(P) per
admitted flow (linear in the patterns P) and Sweep per admitted flow. An
epoch of I ns at R packets/s, a share f of them in attack flows of N
packets of which a share a pass the filter, costs

  E(f) = R*I*((1-f)*Update + f*Tp) + R*I*f*a/N*(Match(P) + Sweep) + S0

and the monitor keeps up while E(f) <= I. The SYN attack sends one minimal
packet per flow; the threshold attack floor(T/40)+1, the smallest flows
that pass threshold T. For each attack and threshold the model's largest
safe attack fraction is printed beside the measured one (largest fraction
of the grid with no epoch over budget at --rate, refined by bisection) and
their ratio, as CSV on standard output; every run is also replayed to check
that every flow that sent more than the threshold in an epoch is tracked
(exit 1 if one is not). Progress goes to standard error.
Method and results: docs/performance.md, 'DoS resilience'.";

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}

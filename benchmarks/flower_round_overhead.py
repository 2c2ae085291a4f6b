"""A FedSampling round through Flower's simulation runtime on 100 and 1,000 SuperNodes ÷ the same round in
fedsample's vectorized simulator, the per-client overhead in ms, and where Flower's time goes.

Same data (digits, log-normal sizes, one partition per SuperNode), model, recipe and seed on both sides.
The Flower round is timed inside the ServerApp after a warm-up round (Ray actors started, node data loaded),
split into its two phases (``report_size`` to every client, ``train`` to every client); the server's own
encoding/decoding of the records and the clients' procedures (fedsample's loop simulator, the same work
without any transport) are timed separately, the rest is Flower's: Ray actor dispatch, the in-memory
SuperLink state, message (de)serialization, polling. Needs the flower extra (without it, it says so and stops).
Run: python benchmarks/flower_round_overhead.py [N ...] [--smoke]   (--smoke: 4 SuperNodes, one timed call)
"""

from __future__ import annotations

import importlib.util
import json
import time

from _common import arguments, best_of, emit, footer, header, progress, skipped  # (sets the source path and one torch thread)

import fedsample as fs  # noqa: E402
from fedsample.client import procedure_for  # noqa: E402
from fedsample.messages import payloads_for, procedure_of  # noqa: E402
from fedsample.federation.simulator import Simulator  # noqa: E402
from fedsample.federation.vectorized import VectorizedSimulator  # noqa: E402
from fedsample.rng import client_rng  # noqa: E402
from fedsample.federation.secure_sum import with_secure_sum  # noqa: E402

FLOWER = importlib.util.find_spec("flwr") is not None  # the flower extra
if FLOWER:
    from fedsample.flower import FlowerFederation, client_app, discover_nodes
    from fedsample.flower.codec import decode_report, decode_request, encode_report, encode_request
    from fedsample.flower.config import AppConfig
    from fedsample.flower.node import client_context, scheme_for

RECIPE = {"K": 64, "epsilon": 3.0, "M": 50, "server_lr": 0.5}


class TimedFederation:
    """Wraps a federation and adds the wall time of each procedure's calls."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, {}

    @property
    def num_clients(self):
        return self.inner.num_clients

    def run(self, client_ids, request, round):
        t = time.perf_counter()
        replies = self.inner.run(client_ids, request, round)
        procedure = payloads_for(request, len(client_ids)).procedure.name
        self.seconds[procedure] = self.seconds.get(procedure, 0.0) + time.perf_counter() - t
        return replies


def settings(n: int) -> dict:
    return {"dataset": "digits", "partition-args": json.dumps({"sigma": 1.0}), "model": "logreg",
            "recipe": "fedsampling", "recipe-args": json.dumps(RECIPE), "num-clients": n}


def setup(n: int):
    config = AppConfig.from_run_config(settings(n))
    dataset = fs.data.load_dataset("digits")
    fed = fs.data.partition(dataset, scheme_for(config, dataset.num_train), seed=0)
    module = fs.models.model_from_name("logreg").build(dataset.input_shape, dataset.num_classes)
    return fed, module, fs.recipes.fedsampling(**RECIPE)


def in_process_round(federation, strategy, module) -> float:
    params = fs.models.initial_parameters(module, 0)
    state = strategy.init_state(params)
    return best_of(lambda: strategy.round(with_secure_sum(federation, strategy.secure_sum), params, state, 1, 0), repeats=3)


def flower_round(n: int, strategy, module) -> dict:
    """Round 2 of the recipe in Flower's simulation runtime (round 1 warms up), by phase."""
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    timing = {}
    app = ServerApp()

    @app.main()
    def main(grid, context):
        t = time.perf_counter()
        nodes = discover_nodes(grid, n, wait=600, timeout=600)
        timing["discover"] = time.perf_counter() - t
        params = fs.models.initial_parameters(module, 0)
        state = strategy.init_state(params)
        for r in range(2):
            federation = TimedFederation(FlowerFederation(grid, nodes, n, seed=0, timeout=600))
            t = time.perf_counter()
            params, log = strategy.round(with_secure_sum(federation, strategy.secure_sum, seed=0), params, state, r, 0)
            timing[f"round{r}"] = time.perf_counter() - t
            timing["phases"], timing["log"] = federation.seconds, log

    backend = {"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2, "include_dashboard": False}}
    t = time.perf_counter()
    run_simulation(app, client_app(settings(n)), num_supernodes=n, backend_config=backend)
    timing["total"] = time.perf_counter() - t
    return timing


class CapturingFederation:
    """Wraps a federation and keeps every call: (procedure, ids, payload, replies)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    @property
    def num_clients(self):
        return self.inner.num_clients

    def run(self, client_ids, request, round):
        replies = self.inner.run(client_ids, request, round)
        self.calls.append(([int(k) for k in client_ids], payloads_for(request, len(client_ids)), replies))
        return replies


def codec_seconds(fed, module, strategy) -> float:
    """The server's encoding of every request and decoding of every reply of one round (payloads and
    reports of an in-process round; no transport)."""
    capture = CapturingFederation(Simulator(fed, module, 0))
    params = fs.models.initial_parameters(module, 0)
    strategy.round(with_secure_sum(capture, strategy.secure_sum, seed=0), params, strategy.init_state(params), 1, 0)

    def round_trip():
        for ids, requests, replies in capture.calls:
            for i, k in enumerate(ids):
                sent = requests.at(i)
                encode_request(k, 0, 1, sent)
                if replies[i] is not None:
                    decode_report(encode_report(sent, replies[i]), sent)

    return best_of(round_trip, repeats=3)


def node_handler_seconds(fed, module, strategy, n: int) -> float:
    """What fedsample's ClientApp handler does per message, summed over one round's messages, without Flower:
    decode the request, build the node's ClientContext (data rows, model), run the procedure, encode the reply."""
    capture = CapturingFederation(Simulator(fed, module, 0))
    params = fs.models.initial_parameters(module, 0)
    strategy.round(with_secure_sum(capture, strategy.secure_sum, seed=0), params, strategy.init_state(params), 1, 0)
    config = AppConfig.from_run_config(settings(n))

    def handle_all():
        for ids, requests, _ in capture.calls:
            for i, k in enumerate(ids):
                sent = requests.at(i)
                request = decode_request(encode_request(k, 0, 1, sent))
                ctx = client_context(config, {"partition-id": k}, {})
                rng = client_rng(0, 1, k, procedure_of(sent).stream)
                encode_report(sent, procedure_for(request.payload)(ctx, request.payload, rng))

    return best_of(handle_all, repeats=3)


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("sizes", nargs="*", type=int, metavar="N", help="SuperNodes per run (default 100 1000)")
    args = parser.parse_args()
    sizes = args.sizes or ([4] if args.smoke else [100, 1000])
    header(args.smoke)
    if not FLOWER:
        skipped("the whole benchmark (a round through Flower's runtime)", "Flower (flwr) is not installed: the `flower` extra, "
                "pip install -e '.[flower]'")
        footer()
        return
    print("| SuperNodes | Flower round (s) | vectorized round (s) | ratio | overhead per client (ms) | report_size phase (s) | train phase (s) | server codec (s) | node handlers (s) | client procedures, loop (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in progress(sizes, lambda n: f"{n} SuperNodes: in-process rounds, codec, handlers, then Flower's simulation"):
        fed, module, strategy = setup(n)
        vectorized = in_process_round(VectorizedSimulator(fed, module, 0), strategy, module)
        loop = in_process_round(Simulator(fed, module, 0), strategy, module)
        codec = codec_seconds(fed, module, strategy)
        handlers = node_handler_seconds(fed, module, strategy, n)
        flower = flower_round(n, strategy, module)
        rnd, phases = flower["round1"], flower["phases"]
        print(f"| {n:,} | {rnd:.2f} | {vectorized:.4f} | {rnd / vectorized:,.0f} | {(rnd - vectorized) / n * 1e3:.1f} | "
              f"{phases.get('report_size', 0):.2f} | {phases.get('train', 0):.2f} | {codec:.2f} | {handlers:.2f} | {loop:.2f} |", flush=True)
        emit(f"  n={n}: roll call (query.identify to every node) s", flower["discover"])
        emit(f"  n={n}: first round (warm-up) s", flower["round0"])
        emit(f"  n={n}: whole run_simulation s", flower["total"])
    footer()


if __name__ == "__main__":
    main()

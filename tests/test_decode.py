"""How decode steps run (nanoatr/machinery/decoding.py): every plan gives the rollout of the plain eager loop.

On a GPU the step is compiled and replayed from CUDA graphs, attends over windows of the cache wider
than its filled part, looks at the rows only every CHECK_EVERY steps and lets finished rows leave the
batch. Each of these is run here on the CPU and must not change a token; the CUDA graphs through a
stand-in that records and replays the step as they do (bench/gpu_check.py part a runs the real ones).
"""
import contextlib
import copy
import warnings

import pytest
import torch

from nanoatr import lora, rollout
from nanoatr.machinery import decoding
from nanoatr.machinery.decoding import CHECK_EVERY, WINDOW, decode_plan
from nanoatr.rollout import DecodePlan, bucket, cache_slots, generate
from nanoatr.model import DecodeSlot, Qwen3, Qwen3Config, init_weights
from rounding import qwen3_float64, sampled_logprob_error, within

EAGER = rollout.EAGER  # the CPU's plan, the one rollout.py reads: exact windows, a look at every step


def fast(*fields) -> DecodePlan:
    """A plan whose steps machinery/decoding.py runs (a StepRunner), as decode_plan's are on a GPU."""
    return DecodePlan(*fields, decoding.run_steps)


GPU_LIKE = fast("eager", 8, 4, True, False)  # the GPU's habits, without the graphs


@pytest.fixture(scope="module")
def small_vocab_model():
    """A random model with 40 tokens, 3 of them EOS: rows end at many different steps. In float64, so that
    the plans' logits differ only in float64 rounding and float32 islands (rounding.qwen3_float64): the
    sampler's log-probs are float32 either way, and a near-tie between two tokens cannot flip a draw."""
    model = Qwen3(Qwen3Config(vocab_size=40, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16))
    init_weights(model, std=0.1, seed=0)
    return model.eval().double()


def ragged(n, vocab=40, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(k),), generator=g).tolist() for k in torch.randint(1, 12, (n,), generator=g)]


def rollout_with(model, plan, prompts, n=60, eos=(7, 9, 11), **kw):
    return generate(model, prompts, n, eos_token_id=list(eos), generator=torch.Generator().manual_seed(0), plan=plan, **kw)


def assert_same(a, b, model):
    """The same tokens, and the sampler's log-probs to rounding (rounding.sampled_logprob_error, of the
    largest logit of a plain forward over a's rows; temperature 1)."""
    assert a.tokens.shape == b.tokens.shape
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, b.mask) and torch.equal(a.finished, b.finished)
    with torch.no_grad():
        z = model(torch.cat([a.prompt_ids, a.tokens], 1),
                  attention_mask=torch.cat([a.prompt_mask, a.mask], 1))
    tol = sampled_logprob_error(model.config, float(z.abs().max()), z.shape[-1])
    within(a.sampler_logp, b.sampler_logp, tol, "sampler log-probs")


def test_the_device_chooses_the_plan_in_one_place():
    assert decode_plan("cpu") == EAGER
    assert decode_plan("cuda") == fast("compiled", WINDOW, CHECK_EVERY, True, True)
    # torch.multinomial draws from the generator inside the step, which a replayed graph would not advance
    assert decode_plan("cuda", "multinomial").decoding == "eager"
    assert decode_plan("cuda", "multinomial", temperature=0).decoding == "compiled"  # greedy draws nothing


@pytest.mark.parametrize("plan", [GPU_LIKE, fast("eager", 1, 3, True, False), fast("eager", 16, 1, False, False),
                                  fast("eager", 5, CHECK_EVERY, True, False), fast("compiled", 8, 4, False, False),
                                  fast("compiled", 8, 4, True, False)],
                         ids=["windows-looks-compaction", "compaction", "windows", "gpu-look-interval", "compiled",
                              "compiled-compaction"])
def test_every_plan_gives_the_eager_rollout(small_vocab_model, plan):
    """The compiled plans: torch.compile of decode_step (what the GPU replays as CUDA graphs), on the CPU: the
    same tokens for the same seed, log-probs to float rounding (fused kernels round differently)."""
    prompts = ragged(24)
    ref = rollout_with(small_vocab_model, EAGER, prompts)
    assert ref.mask.sum(1).min() < 10 and 40 < ref.mask.sum(1).max() <= 60, "rows end at different steps"
    assert_same(ref, rollout_with(small_vocab_model, plan, prompts), small_vocab_model)


def test_the_width_is_the_longest_row_whatever_the_look_interval(small_vocab_model):
    """A look every few steps decodes a few steps past the last EOS; they are cut off again."""
    prompts = ragged(6, seed=3)
    ref = rollout_with(small_vocab_model, EAGER, prompts, n=200)
    assert ref.tokens.shape[1] < 200 and ref.tokens.shape[1] == ref.mask.sum(1).max()
    assert_same(ref, rollout_with(small_vocab_model, fast("eager", 8, 16, True, False), prompts, n=200),
                small_vocab_model)


def test_stop_strings_under_the_gpu_plan(small_vocab_model):
    """Stop strings are looked for every STOP_EVERY steps under every plan, on the rows still live."""
    prompts = ragged(8, seed=4)

    class Stop:  # a row "holds a stop string" once it has drawn token 3 twice, and ends with that token
        def holds(self, rows):
            return [row.count(3) >= 2 for row in rows]

        def cut(self, tokens, mask):
            second = (tokens == 3).cumsum(1) >= 2
            hit = second.any(1)
            end = torch.where(hit, second.int().argmax(1), tokens.shape[1])
            return mask & (torch.arange(tokens.shape[1]) <= end[:, None]), hit

    ref = rollout_with(small_vocab_model, EAGER, prompts, n=120, eos=(), stopper=Stop())
    assert 0 < ref.finished.sum() < len(prompts)
    assert_same(ref, rollout_with(small_vocab_model, GPU_LIKE, prompts, n=120, eos=(), stopper=Stop()),
                small_vocab_model)


def test_finished_rows_leave_the_batch_in_halvings(small_vocab_model, monkeypatch):
    """The step runs on bucket(live) rows (a power of two), windows are multiples of plan.window that
    cover every filled slot."""
    seen = []
    step = rollout.decode_step

    def spy(model, s, window, *args):
        seen.append((len(s.rows), window, int(s.slot)))
        return step(model, s, window, *args)
    monkeypatch.setattr(rollout, "decode_step", spy)
    assert decoding.StepRunner(spy, small_vocab_model, None, None, GPU_LIKE).step is spy, "an eager plan's, as is"
    prompts = ragged(24)
    rollout_with(small_vocab_model, GPU_LIKE, prompts)
    sizes = [b for b, _, _ in seen]
    assert sizes[0] == 24 and sizes == sorted(sizes, reverse=True) and len(set(sizes)) > 2
    assert all(b & (b - 1) == 0 for b in sizes if b < 24), "after the first compaction, powers of two"
    cache_len = cache_slots(max(map(len, prompts)) + 60, GPU_LIKE)
    assert cache_len == 72 + 1, "whole windows and a slot more"
    assert all(w % 8 == 0 and slot < w < cache_len for _, w, slot in seen), "no window is the whole cache"
    assert [bucket(n) for n in (1, 2, 3, 5, 8, 9, 24)] == [2, 2, 4, 8, 8, 16, 32]


def test_a_window_past_the_filled_slots_changes_nothing(small_vocab_model):
    """Qwen3.decode over a wider window than the filled slots: the unfilled ones are masked out, and
    zeros (not uninitialised memory, whose NaN would survive a weight of 0)."""
    model = small_vocab_model
    ids = torch.tensor([[0, 0, 5, 6, 7], [1, 2, 3, 4, 5]])
    mask = ids.new_tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]).bool()
    outs = []
    for window in (6, 16):
        cache = model.new_cache(2, 16)
        with torch.no_grad():
            model.hidden(ids, attention_mask=mask, position_ids=(mask.long().cumsum(-1) - 1).clamp(min=0), cache=cache)
            outs.append(model.decode(torch.tensor([[9], [9]]), torch.tensor([[3], [5]]),
                                     DecodeSlot(cache, torch.tensor([5]), window)))
        assert all((k[:, :, 6:] == 0).all() for k in cache.k)
    # hidden states after the final norm: rounding.qwen3_float64's bound, of their largest entry
    tol = qwen3_float64(model.config) * outs[0].abs().max()
    within(outs[0], outs[1], tol, "window 6 vs 16")
    # and the step equals the full forward's last position
    full = model.hidden(torch.cat([ids, torch.tensor([[9], [9]])], 1),
                        attention_mask=torch.cat([mask, mask[:, :1] | True], 1))
    within(outs[0][:, 0], full[:, -1], tol, "step vs full")


def test_no_host_sync_inside_the_per_token_loop(small_vocab_model, monkeypatch):
    """Under the GPU's plan the loop reads values back (.item(), .tolist(), bool(), int(), nonzero) only
    when it looks at the rows, every CHECK_EVERY steps, never per token."""
    prompts = ragged(16)
    reads = []
    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "nonzero"):
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _original=original, _name=name, **k):
            reads.append(_name)
            return _original(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, counted)
    n = 96
    plan = fast("eager", 8, CHECK_EVERY, True, False)
    steps = []
    monkeypatch.setattr(decoding, "StepRunner", counting_runner(decoding.StepRunner, steps))
    with torch.no_grad():
        out = rollout_with(small_vocab_model, plan, prompts, n=n, eos=(7,))
    monkeypatch.undo()
    assert len(steps) > 2 * CHECK_EVERY, "the rollout ran long enough to tell"
    looks = -(-len(steps) // CHECK_EVERY) + 1
    # per look: int(live) and, when rows leave, two nonzero(); the prefill's padding index, the final cut
    assert len(reads) <= 3 * looks + 4, reads
    assert out.tokens.shape[1] == out.mask.sum(1).max()


def counting_runner(cls, steps, rows=False):
    """cls counting its steps in `steps`: each one's window (rows=True: its (rows, window))."""
    class Counting(cls):
        def __call__(self, s, window):
            steps.append((len(s.rows), window) if rows else window)
            return super().__call__(s, window)
    return Counting


def test_lora_is_merged_for_the_rollout_and_the_base_weights_come_back_bit_for_bit(small_vocab_model):
    model = copy.deepcopy(small_vocab_model)
    peft_model = lora.add_adapters(model, 4, 8.0, lora.TARGETS, "random")
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)  # a trained adapter: the merged weights differ from the base
    base = {k: v.clone() for k, v in model.state_dict().items() if "base_layer" in k}
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        plain = model(ids)
        with lora.merged(model):
            assert all(m.merged for m in model.modules() if hasattr(m, "lora_A"))
            merged = model(ids)
            assert any(not torch.equal(model.state_dict()[k], v) for k, v in base.items())
    # in float64, W x + B (A x) against (W + B A) x: a few length-64 sums apiece, far below the islands' bound
    within(plain, merged, qwen3_float64(model.config) * plain.abs().max(), "merged vs adapters")
    assert all(torch.equal(model.state_dict()[k], v) for k, v in base.items()), "restored exactly"
    assert not any(m.merged for m in model.modules() if hasattr(m, "lora_A"))
    prompts = ragged(8)
    merged_plan = EAGER._replace(merge_adapters=True)
    assert_same(rollout_with(model, EAGER, prompts), rollout_with(model, merged_plan, prompts), model)


# ----------------------------------------------------------------------------
# CUDA graphs through a stand-in, their failures, and the compiles of a run

class StandInGraphs:
    """decoding.CudaGraphs on the CPU. Recording calls the step, as CUDA's capture does, while `capturing`
    says that nothing may run (a CountedStep then runs nothing); a replay runs it (a graph reads the tensors
    it was recorded on, which the state's in-place updates keep). The n-th recording or replay can be made
    to fail; `after_failure` counts any use after that."""

    def __init__(self, fail_record: int = 0, fail_replay: int = 0):
        self.calls, self.fail_record, self.fail_replay = {}, fail_record, fail_replay
        self.records = self.replays = self.drops = self.after_failure = 0
        self.failed = self.capturing = False

    def __contains__(self, shape):
        return shape in self.calls

    def warm_up(self, fn):
        fn()

    def record(self, shape, fn):
        self.records += 1
        self.fail_if(self.records == self.fail_record, "recording")
        self.capturing = True
        try:
            fn()
        finally:
            self.capturing = False
        self.calls[shape] = fn

    def replay(self, shape):
        self.replays += 1
        self.fail_if(self.replays == self.fail_replay, "replay")
        self.calls[shape]()

    def fail_if(self, now: bool, what: str):
        self.after_failure += self.failed
        if now:
            self.failed = True
            raise RuntimeError(f"{what} failed (injected)")

    def drop(self):
        self.calls.clear()
        self.drops += 1


def with_graphs(monkeypatch, graphs, compiled=None):
    """Rollouts from here on record and replay through `graphs`; the compiled plan's step is `compiled`
    (a stand-in for torch.compile's: compiling on the CPU takes minutes), and graph failures start afresh."""
    class WithGraphs(decoding.StepRunner):
        def __init__(self, *args):
            super().__init__(*args, graphs=graphs)
    monkeypatch.setattr(decoding, "StepRunner", WithGraphs)
    monkeypatch.setattr(decoding.StepRunner, "use_graphs", True)
    monkeypatch.setattr(decoding, "COMPILED", {})
    if compiled is not None:
        monkeypatch.setattr(decoding, "compiled_step", lambda step: compiled)


class CountedStep:
    """A stand-in for the compiled decode step: the eager one, its runs counted; while `graphs` records it
    nothing runs (or, with fail_recording, it cannot be recorded). Its n-th run can fail first (a failed
    compile: nothing ran)."""

    def __init__(self, graphs: StandInGraphs, fail_at: int = 0, fail_recording: bool = False):
        self.graphs, self.calls, self.fail_at, self.fail_recording = graphs, 0, fail_at, fail_recording

    def __call__(self, *args):
        if self.graphs.capturing:
            if self.fail_recording:
                raise RuntimeError("operation not permitted when stream is capturing (injected)")
            return
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("compiled step failed (injected)")
        rollout.decode_step(*args)


GPU_COMPILED = fast("compiled", 8, 4, True, False)


def steps_of(model, plan, prompts, monkeypatch) -> int:
    """How many decode steps the loop makes under this plan (the same for every way of running them)."""
    steps = []
    with monkeypatch.context() as m:
        m.setattr(decoding, "StepRunner", counting_runner(decoding.StepRunner, steps))
        rollout_with(model, plan, prompts)
    return len(steps)


RECORDING = "recording the decode step's CUDA graph failed"
FAILURES = {  # what fails: (StandInGraphs' and CountedStep's arguments), the warnings' first words
    "nothing": ({}, {}, []),
    "record": ({"fail_record": 3}, {}, [RECORDING]),
    "replay": ({"fail_replay": 3}, {}, ["replaying the decode step's CUDA graph failed"]),
    "unrecordable": ({}, {"fail_recording": True}, [RECORDING]),
    "compile": ({"fail_record": 2}, {"fail_at": 9}, [RECORDING, "torch.compile of the decode step failed"])}


@pytest.mark.parametrize("failing", FAILURES)
def test_graphs_and_their_fallbacks_give_the_eager_rollout(small_vocab_model, monkeypatch, failing):
    """Rows end at EOS at different steps and leave the batch; every shape is recorded once, replayed after,
    and dropped when the batch shrinks. A recording runs nothing (the step ran just before it): after a
    failed one the step must not run again. A failed replay ran nothing: the step runs without it. A failure
    inside the recording (unrecordable) is the graph's, not the compile's: the compiled step goes on without
    graphs. A failed compile ran nothing: the eager step from then on. One warning each; no graph after the
    failure, in the rest of the process either; the tokens of the eager loop always."""
    prompts = ragged(24)
    ref = rollout_with(small_vocab_model, EAGER, prompts)
    n = steps_of(small_vocab_model, GPU_LIKE, prompts, monkeypatch)
    fail_graphs, fail_step, warned = FAILURES[failing]
    graphs = StandInGraphs(**fail_graphs)
    step = CountedStep(graphs, **fail_step)
    with_graphs(monkeypatch, graphs, step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = rollout_with(small_vocab_model, GPU_COMPILED, prompts)
    said = [str(w.message) for w in caught]
    assert [m.split(" (")[0] for m in said] == warned and all("injected" in m for m in said)
    assert all("without CUDA graphs" in m for m in said[:1])
    assert_same(ref, out, small_vocab_model)
    assert graphs.after_failure == 0 and decoding.StepRunner.use_graphs == (failing == "nothing")
    assert step.calls == (9 if failing == "compile" else n), "every step ran once; a failed compile ran nothing"
    assert decoding.COMPILED.get(rollout.decode_step) is (rollout.decode_step if failing == "compile" else None)
    if failing == "nothing":  # each step warmed up (the first of its shape) or replayed
        assert graphs.replays > graphs.records > 3 and graphs.drops >= 2 and graphs.records + graphs.replays == n


def test_under_autocast_a_recorded_step_runs_without_autocasts_weight_cache(small_vocab_model, monkeypatch):
    """A graph's replay would read the cast weights autocast caches and frees on exit: off when recording."""
    cached, graphs = [], StandInGraphs()
    step = CountedStep(graphs)
    with_graphs(monkeypatch, graphs, lambda *a: cached.append(torch.is_autocast_cache_enabled()) or step(*a))
    with torch.autocast("cpu", torch.bfloat16):
        rollout_with(small_vocab_model, GPU_COMPILED, ragged(4))
    assert cached and not any(cached) and graphs.replays > 0


@pytest.mark.parametrize("plan, error", [(GPU_LIKE, RuntimeError("a bug")),
                                         (GPU_COMPILED, torch.OutOfMemoryError("out of memory"))])
def test_an_error_not_the_compiles_is_raised_with_no_fallback(small_vocab_model, monkeypatch, plan, error):
    """The eager step's own error, and the compiled step running out of memory, are not a failed compile."""
    fails = lambda *args: (_ for _ in ()).throw(error)  # the eager step, and the compiled one
    monkeypatch.setattr(decoding, "compiled_step", lambda step: fails)
    runner = decoding.StepRunner(fails, small_vocab_model, None, None, plan)
    with warnings.catch_warnings(), pytest.raises(type(error)):
        warnings.simplefilter("error")  # a fallback to the eager step warns
        runner.run(None, 8)


@pytest.mark.slow
@pytest.mark.parametrize("lora_bf16", [False, True], ids=["plain-float32", "lora-merged-bf16"])
def test_one_compile_per_run(small_vocab_model, monkeypatch, lora_bf16):
    """torch.compile of the decode step compiles once for a rollout whose batch shrinks (rows end at EOS)
    and whose windows grow, and not again for a second rollout of another batch and prompt length."""
    from torch._dynamo.utils import counters
    model = small_vocab_model
    if lora_bf16:
        model = copy.deepcopy(small_vocab_model)
        lora.add_adapters(model, 4, 8.0, lora.TARGETS, "random")
    monkeypatch.setattr(decoding, "COMPILED", {})
    torch._dynamo.reset()
    counters.clear()
    shapes = []
    monkeypatch.setattr(decoding, "StepRunner", counting_runner(decoding.StepRunner, shapes, rows=True))
    plan = fast("compiled", 8, 4, True, lora_bf16)
    amp = torch.autocast("cpu", torch.bfloat16) if lora_bf16 else contextlib.nullcontext()
    with amp:
        rollout_with(model, plan, ragged(24))
    rows, windows = {b for b, _ in shapes}, {w for _, w in shapes}
    assert len(rows) >= 3 and len(windows) >= 3, "the batch shrank and the windows grew"
    assert counters["stats"]["unique_graphs"] == 1
    with amp:
        rollout_with(model, plan, ragged(13, seed=5), n=50)
    assert counters["stats"]["unique_graphs"] == 1, "no compile for the second rollout"
    torch._dynamo.reset()

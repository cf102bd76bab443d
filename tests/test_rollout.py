import copy

import pytest
import torch

from nanoatr.rollout import SAMPLERS, STOP_EVERY, Rollout, draw, filter_logits, generate, sampling_logprobs
from rounding import sampled_logprob_error, within

PROMPTS = [[5, 17, 3, 9, 22, 41, 8], [11, 2], [30, 31, 32, 33]]


@pytest.fixture(scope="module")
def tiny64(tiny_model):
    """The tiny model in float64: the KV-cache rollout and the full forward it is compared with then differ
    only in float64 rounding and float32 islands (rounding.qwen3_float64), so a near-tie between two tokens
    cannot make a greedy step or a draw go another way."""
    return copy.deepcopy(tiny_model).double()


def greedy_without_cache(model, prompt, n):
    """Reference: re-run the whole sequence every step, no cache, no padding; the argmax of the sampler's
    own float32 scores (a float64 tie broken in float32 goes the sampler's way)."""
    seq = list(prompt)
    for _ in range(n):
        with torch.no_grad():
            seq.append(int(sampling_logprobs(model(torch.tensor([seq]))[0, -1], 0).argmax()))
    return seq[len(prompt):]


def full_forward_logprobs(model, prompt, completion, temperature):
    seq = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(seq)[0, len(prompt) - 1:-1]  # the logit at position i scores token i + 1
    return sampling_logprobs(logits, temperature).gather(-1, torch.tensor(completion)[:, None]).squeeze(1)


def test_greedy_with_cache_equals_without_and_each_row_generating_it_alone(tiny64):
    out = generate(tiny64, PROMPTS, max_new_tokens=12, temperature=0)
    for i, p in enumerate(PROMPTS):
        assert out.tokens[i].tolist() == greedy_without_cache(tiny64, p, 12)
        assert out.tokens[i].tolist() == generate(tiny64, [p], max_new_tokens=12, temperature=0).tokens[0].tolist()


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("temperature, top_k", [(1.0, 20), (0.7, 20), (1.0, 3)])
def test_logprobs_equal_one_full_forward_and_top_k_keeps_to_the_top_k(tiny64, temperature, top_k, sampler):
    g = torch.Generator().manual_seed(0)
    out = generate(tiny64, PROMPTS * 4, max_new_tokens=9, temperature=temperature, top_k=top_k, top_p=0.9,
                   generator=g, sampler=sampler)
    for i, p in enumerate(PROMPTS * 4):
        ref = full_forward_logprobs(tiny64, p, out.tokens[i].tolist(), temperature)
        with torch.no_grad():
            z = tiny64(torch.tensor([p + out.tokens[i].tolist()]))
        tol = sampled_logprob_error(tiny64.config, float(z.abs().max()), z.shape[-1], temperature)
        within(out.sampler_logp[i], ref, tol, "sampler vs full forward")
        # every sampled token was among the top_k most likely under the full forward
        assert (z[0, len(p) - 1:-1].topk(top_k, -1).indices == out.tokens[i][:, None]).any(-1).all()


def test_rows_that_stop_are_masked_and_decoding_ends_when_all_have(tiny_model):
    free = generate(tiny_model, PROMPTS, max_new_tokens=10, temperature=0)
    eos = int(free.tokens[0, 3])  # make row 0 stop at step 3 (or earlier if the token came sooner)
    out = generate(tiny_model, PROMPTS, max_new_tokens=10, temperature=0, eos_token_id=eos, pad_id=0)
    for i in range(len(PROMPTS)):
        row = out.tokens[i].tolist()
        if eos in row:
            stop = row.index(eos)
            assert out.mask[i, :stop + 1].all(), "the EOS itself is a real, trained token"
            assert not out.mask[i, stop + 1:].any()
            assert all(t == 0 for t in row[stop + 1:])
            assert (out.sampler_logp[i, stop + 1:] == 0).all()
        else:
            assert out.mask[i].all()
    assert out.finished.tolist() == [True, False, False]  # ended by an EOS: row 0 alone draws it
    alone = generate(tiny_model, PROMPTS[:1], max_new_tokens=10, temperature=0, eos_token_id=eos)
    assert alone.tokens.shape[1] == out.tokens[0].tolist().index(eos) + 1  # decoding stops at the last row's EOS


def test_stop_callable_ends_decoding_sooner_and_changes_no_token(tiny_model):
    """A row is done once the stop callable says so (checked every STOP_EVERY tokens); the batch ends
    when every row is, and what was drawn is the prefix of what is drawn without the callable (the same
    seed, the same draws). One that finds nothing changes nothing: a row ended by an EOS stays finished."""
    n = 3 * STOP_EVERY
    free = generate(tiny_model, PROMPTS, n, generator=torch.Generator().manual_seed(5))
    seen = []

    class Stop:  # row 0 "holds a stop string" at the first check, the others at the second
        def holds(self, rows):
            seen.append(len(rows))
            return [len(seen) > 1 or i == 0 for i in range(len(rows))]

        def cut(self, tokens, mask):  # nothing to cut: keep the EOS mask
            return mask, torch.zeros(len(mask), dtype=torch.bool)

    out = generate(tiny_model, PROMPTS, n, generator=torch.Generator().manual_seed(5), stopper=Stop())
    assert out.tokens.shape[1] == 2 * STOP_EVERY
    assert seen == [len(PROMPTS), len(PROMPTS) - 1]  # a finished row is not checked again
    assert torch.equal(out.tokens, free.tokens[:, :2 * STOP_EVERY])
    assert torch.equal(out.sampler_logp, free.sampler_logp[:, :2 * STOP_EVERY])

    class Never(Stop):
        def holds(self, rows):
            return [False] * len(rows)
    eos = int(free.tokens[0, 2])  # row 0 ends at an EOS by step 2
    plain, never = (generate(tiny_model, PROMPTS, n, generator=torch.Generator().manual_seed(5), eos_token_id=eos,
                             stopper=stopper) for stopper in (None, Never()))
    assert never.finished[0] and torch.equal(never.finished, plain.finished)
    assert torch.equal(never.tokens, plain.tokens) and torch.equal(never.mask, plain.mask)


def test_top_k_and_top_p_filters():
    logp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isfinite(filter_logits(logp, 2, 1.0)).tolist() == [[True, True, False, False]]
    # nucleus 0.8: 0.5 alone < 0.8, 0.5 + 0.3 reaches it, so the first two stay
    assert torch.isfinite(filter_logits(logp, 0, 0.8)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(filter_logits(logp, 0, 0.81)).tolist() == [[True, True, True, False]]
    assert torch.isfinite(filter_logits(logp, 0, 0.01)).tolist() == [[True, False, False, False]]
    assert torch.isfinite(filter_logits(torch.tensor([[0.0, -30.0]]), 0, 1.0)).all()  # top_p 1: none dropped


def test_greedy_equals_transformers_generate(hf_dir):
    """Token for token, on a left-padded batch of different prompt lengths. transformers needs the
    padding on the left and the attention mask; it derives position ids from the mask in generate."""
    from nanoatr.model import Qwen3
    path, hf = hf_dir
    ours = Qwen3.from_pretrained(path).eval()
    prompts = [[5, 17, 3, 9, 22, 41, 8, 60, 2], [11, 2], [30, 31, 32, 33], [7]]
    P = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (P - len(p)) + p for p in prompts])
    attention_mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        ref = hf.generate(input_ids=ids, attention_mask=attention_mask, max_new_tokens=16, do_sample=False,
                          eos_token_id=None, pad_token_id=0, use_cache=True)[:, P:]
    out = generate(ours, prompts, max_new_tokens=16, temperature=0)
    assert out.mask.all()
    assert out.tokens.tolist() == ref.tolist()


def test_rollout_tensors_can_be_saved_for_backward(tiny_model):
    """generate runs under inference mode, but what it returns must be usable in a scored update."""
    from nanoatr.rollout import left_pad
    from nanoatr.scoring import score
    out = generate(tiny_model, PROMPTS, 5, generator=torch.Generator().manual_seed(0))
    assert not any(t.is_inference() for t in out if t is not None)
    ids, mask = left_pad(PROMPTS)
    logp = score(tiny_model, ids, mask, out.tokens, 1.0).logp
    logp.sum().backward()
    tiny_model.zero_grad(set_to_none=True)


def test_unpadded_cuts_only_the_padding_the_rows_share_and_cat_pads_it_back():
    """Rows 0 and 2: prompts of 2 and 1 tokens (left-padded to 4), completions of 2 and 3 (right-padded to
    5): cut to 2 prompt and 3 completion columns; rows without a completion token keep one column. Rollout.cat
    pads row 2 alone (1 and 3 columns) back under row 0: prompts on the left, completions on the right."""
    prompt_mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1], [0, 0, 0, 1]], dtype=torch.bool)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    ids, tokens = torch.arange(12).view(3, 4), torch.arange(15).view(3, 5)
    r = Rollout(ids, prompt_mask, tokens, mask * 0.5, mask, mask[:, 0])
    ids, pmask, tokens, tmask = r.unpadded([0, 2])
    assert (ids.tolist(), pmask.tolist()) == ([[2, 3], [10, 11]], [[True, True], [False, True]])
    assert (tokens.tolist(), tmask.tolist()) == ([[0, 1, 2], [10, 11, 12]], [[True, True, False], [True] * 3])
    assert r._replace(mask=mask & False).unpadded([0, 2])[2].tolist() == [[0], [10]]
    p, pm, t, m = r.unpadded([2])
    c = Rollout.cat([r.select([0]), Rollout(p, pm, t, m * 0.5, m, m[:, 0])], pad_id=-1)
    assert (c.prompt_ids[1].tolist(), c.tokens[1].tolist()) == ([-1, -1, -1, 11], [10, 11, 12, -1, -1])
    assert c.prompt_mask.equal(prompt_mask[[0, 2]]) and c.mask.equal(mask[[0, 2]])


@pytest.mark.parametrize("V", [50, 128, 1000, 1024])  # one level, one full block, zero-padded blocks, unpadded blocks
def test_inverse_cdf_draws_follow_the_probabilities(V):
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(2 * torch.randn(V, generator=g), -1)
    probs[::7] = 0.0  # filtered tokens (top-k / top-p) must never come out
    probs[-1] = 0.0
    n = 200_000
    draws = draw(probs.expand(n, V), g, "inverse-cdf")
    assert draws.shape == (n, 1)
    freq = torch.bincount(draws[:, 0], minlength=V).double() / n
    assert freq.shape == (V,)
    assert (freq[probs == 0] == 0).all()
    p = probs.double() / probs.sum()
    sigma = (p * (1 - p) / n).sqrt()
    assert ((freq - p).abs() <= 5 * sigma + 1e-12).all()


def test_draw_handles_one_sure_token():
    probs = torch.zeros(3, 300)
    probs[0, 0], probs[1, 299], probs[2, 130] = 1.0, 2.0, 0.5  # unnormalised rows are fine
    for seed in range(20):
        out = draw(probs, torch.Generator().manual_seed(seed), "inverse-cdf")
        assert out[:, 0].tolist() == [0, 299, 130]
    with pytest.raises(ValueError, match="sampler"):
        draw(probs, None, "gumbel")


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_draw_refuses_probabilities_that_are_not_finite(sampler):
    """NaN (a forward that overflowed) is one ValueError naming it under either sampler: not torch's
    multinomial error, nor a token that inverse-CDF would draw from it silently."""
    probs = torch.ones(2, 300)
    probs[1, 7] = float("nan")
    with pytest.raises(ValueError, match=r"^the sampling probabilities are not finite \(row 1 holds nan\)"):
        draw(probs, torch.Generator().manual_seed(0), sampler)

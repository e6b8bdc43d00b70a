"""The three torch PPO scripts (ppo_atari_envpool, ppo_procgen, ppo_continuous_mujoco) each carry PPO's loss, a
copied script stands alone; these tests keep the copies one loss. ppo_loss, LossStats and update are the same code
in all three; what differs is the head (evaluate_actions: categorical or Gaussian), the masked mean's reduction
(MuJoCo's is a dot product, which rounds otherwise) and, in the image scripts, the chunked minibatch. The same
inputs must give the same loss, statistics and gradients in all three, under either head, and CleanRL's."""
import ast
import os
import sys
from types import SimpleNamespace

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from cleanrl_scaling import ppo_atari_envpool as atari, ppo_continuous_mujoco as mujoco  # noqa: E402
from cleanrl_scaling import ppo_procgen as procgen  # noqa: E402

SCRIPTS = {"ppo_atari_envpool": atari, "ppo_procgen": procgen, "ppo_continuous_mujoco": mujoco}
N = 64


def top_level(name: str) -> dict:
    path = os.path.join(ROOT, "cleanrl_scaling", f"{name}.py")
    source = open(path).read()
    return {n.name: ast.get_source_segment(source, n) for n in ast.parse(source).body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def test_the_loss_and_the_update_are_one_code_in_the_three_scripts():
    code = {name: top_level(name) for name in SCRIPTS}
    for fn in ("NextStep", "Batch", "LossStats", "ppo_loss", "update"):
        assert code["ppo_atari_envpool"][fn] == code["ppo_procgen"][fn] == code["ppo_continuous_mujoco"][fn], fn
    # the two categorical scripts share the rest of the minibatch step as well
    for fn in ("masked_mean", "normalize_advantages", "evaluate_actions", "minibatch_gradient"):
        assert code["ppo_atari_envpool"][fn] == code["ppo_procgen"][fn], fn
    # and every script's signatures are the same, so that `diff` shows only the head and the reduction
    for fn in ("masked_mean", "normalize_advantages", "evaluate_actions", "minibatch_gradient"):
        signatures = {code[name][fn].split(":", 1)[0] for name in SCRIPTS}
        assert len(signatures) == 1, signatures


def minibatch(newlogprob: torch.Tensor, seed: int = 0) -> dict:
    """A minibatch whose ratios (behaviour log-probs 0.3 sigma off the current policy's) and values fall on both
    sides of the clip, with three masked samples."""
    g = torch.Generator().manual_seed(seed)
    valid = torch.ones(N)
    valid[[3, 17, 40]] = 0.0
    return {"logprobs": newlogprob.detach() + 0.3 * torch.randn(N, generator=g),
            "advantages": 3 * torch.randn(N, generator=g) + 1, "returns": torch.randn(N, generator=g),
            "values": torch.randn(N, generator=g), "valid": valid}


def head(kind: str, seed: int = 1) -> tuple:
    """(leaf parameters, actions, terms(params) -> (log pi(a|s), entropy, V(s))) of a categorical or Gaussian
    policy written with torch.distributions: an independent route to what evaluate_actions returns."""
    g = torch.Generator().manual_seed(seed)
    value = (0.5 * torch.randn(N, generator=g)).requires_grad_()
    if kind == "categorical":
        logits = torch.randn(N, 4, generator=g).requires_grad_()
        actions = torch.randint(0, 4, (N,), generator=g)
        def terms(logits, value):
            dist = torch.distributions.Categorical(logits=logits)
            return dist.log_prob(actions), dist.entropy(), value
        return (logits, value), actions, terms
    mu, logstd = torch.randn(N, 2, generator=g).requires_grad_(), (0.3 * torch.randn(1, 2, generator=g)).requires_grad_()
    actions = torch.randn(N, 2, generator=g)
    def terms(mu, logstd, value):
        dist = torch.distributions.Normal(mu, logstd.exp().expand_as(mu))
        return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1), value
    return (mu, logstd, value), actions, terms


def loss_and_gradients(module, kind, args, monkeypatch) -> tuple:
    """module.ppo_loss on the shared minibatch, with its head replaced by `kind`'s: (loss, stats, gradients)."""
    params, actions, terms = head(kind)
    monkeypatch.setattr(module, "evaluate_actions", lambda agent, obs, act: terms(*params))
    mb = minibatch(terms(*params)[0])
    count = mb["valid"].sum()
    loss, stats = module.ppo_loss(None, None, actions, mb["logprobs"], mb["advantages"], mb["returns"], mb["values"],
                                  mb["valid"], count, args)
    grads = torch.autograd.grad(loss, params)
    return loss.detach(), torch.stack(stats), torch.cat([g.reshape(-1) for g in grads])


def cleanrl_loss_and_gradients(kind, args) -> tuple:
    """CleanRL's loss written out on the valid samples alone (boolean indexing, .mean())."""
    params, actions, terms = head(kind)
    mb = minibatch(terms(*params)[0])
    keep = mb["valid"].bool()
    newlogprob, entropy, newvalue = (t[keep] for t in terms(*params))
    logratio = newlogprob - mb["logprobs"][keep]
    ratio = logratio.exp()
    adv, returns, values = mb["advantages"][keep], mb["returns"][keep], mb["values"][keep]
    pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
    if args.clip_vloss:
        v_clipped = values + torch.clamp(newvalue - values, -args.clip_coef, args.clip_coef)
        v_loss = 0.5 * torch.max((newvalue - returns) ** 2, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((newvalue - returns) ** 2).mean()
    loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
    stats = torch.stack([pg_loss, v_loss, entropy.mean(), (-logratio).mean(), ((ratio - 1) - logratio).mean(),
                         ((ratio - 1.0).abs() > args.clip_coef).float().mean()]).detach()
    grads = torch.autograd.grad(loss, params)
    return loss.detach(), stats, torch.cat([g.reshape(-1) for g in grads])


@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("kind", ["categorical", "gaussian"])
def test_same_inputs_give_the_same_loss_and_gradients_in_the_three_scripts(kind, clip_vloss, monkeypatch):
    args = SimpleNamespace(clip_coef=0.2, clip_vloss=clip_vloss, ent_coef=0.01, vf_coef=0.5)
    results = {name: loss_and_gradients(module, kind, args, monkeypatch) for name, module in SCRIPTS.items()}
    reference = cleanrl_loss_and_gradients(kind, args)
    assert 0.05 < reference[1][5] < 0.95  # some ratios are clipped, some not: both branches of the surrogate run
    # atari and procgen: the same code and reduction, so the same bits
    for ours, theirs in zip(results["ppo_atari_envpool"], results["ppo_procgen"]):
        assert torch.equal(ours, theirs)
    # mujoco's dot product rounds otherwise; every script is CleanRL's loss up to float rounding
    for name, result in results.items():
        for ours, cleanrl, what in zip(result, reference, ("loss", "stats", "gradients")):
            assert torch.allclose(ours, cleanrl, rtol=1e-5, atol=1e-7), (name, what, ours, cleanrl)


def test_the_heads_are_torch_distributions():
    """evaluate_actions: the categorical head of atari and procgen and MuJoCo's Gaussian head give what
    torch.distributions gives (log-prob, entropy, value)."""
    g = torch.Generator().manual_seed(2)
    logits, value = torch.randn(N, 6, generator=g), torch.randn(N, generator=g)
    actions = torch.randint(0, 6, (N,), generator=g)
    dist = torch.distributions.Categorical(logits=logits)
    for module in (atari, procgen):
        logp, entropy, v = module.evaluate_actions(lambda obs: (logits, value), None, actions)
        assert torch.allclose(logp, dist.log_prob(actions), atol=1e-6) and torch.allclose(entropy, dist.entropy(), atol=1e-6)
        assert torch.equal(v, value)
    mu, logstd, cont = torch.randn(N, 3, generator=g), 0.5 * torch.randn(1, 3, generator=g), torch.randn(N, 3, generator=g)
    normal = torch.distributions.Normal(mu, logstd.exp().expand_as(mu))
    logp, entropy, v = mujoco.evaluate_actions(lambda obs: (mu, logstd, value), None, cont)
    assert torch.allclose(logp, normal.log_prob(cont).sum(-1), atol=1e-5)
    assert torch.allclose(entropy, normal.entropy().sum(-1), atol=1e-6) and torch.equal(v, value)


def test_advantage_normalisation_is_one_in_the_three_scripts():
    """Each script normalises a minibatch's advantages before the loss, over its valid samples (CleanRL's mean and
    unbiased std, masked samples left out)."""
    mb = minibatch(torch.zeros(N))
    keep = mb["valid"].bool()
    adv = mb["advantages"]
    expected = (adv - adv[keep].mean()) / (adv[keep].std() + 1e-8)
    out = {name: module.normalize_advantages(adv, mb["valid"], mb["valid"].sum(), module.Ranks())
           for name, module in SCRIPTS.items()}
    for name, normalised in out.items():
        assert torch.allclose(normalised[keep], expected[keep], rtol=1e-5, atol=1e-6), name
    assert torch.equal(out["ppo_atari_envpool"], out["ppo_procgen"])

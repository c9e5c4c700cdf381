"""Training loops (torch, CPU): the visual encoder with per-cell auxiliary labels, BUTR/BUTD with GradNorm
loss weighting (Nikolaus et al., 2019, §5.3), and the VSE++ ranker. Each loop shows a tqdm progress bar.

Captioners are selected on their split's validation set as in Nikolaus et al. (2019, §4–5) ("trained on
D_train until it converges, as measured on the D_val validation split (BLEU)"): after every epoch the val
images are decoded greedily and scored by corpus BLEU-4 against their references; the weights of the best
epoch are kept, and training stops after ``preset.patience`` epochs without improvement or at the epoch
cap."""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from export.models.butr import BUTR, not_negatives, ranking_loss
from export.models.visual_encoder import CellHeads, VisualEncoder
from export.models.vsepp import VSEPP
from export.presets import Preset
from service.evaluation.metrics import normalise
from service.text.vocabulary import Vocabulary, encode_batch

OBJECT_CELL_WEIGHT = 4.0


@dataclass
class TrainLog:
    seconds: float = 0.0
    epochs: int = 0  # epochs run
    losses: list[float] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)
    max_epochs: int = 0  # the cap
    val_bleu4: list[float] = field(default_factory=list)  # after each epoch run (empty: no validation)
    selected_epoch: int | None = None  # 1-based epoch whose weights were kept (None: the last, unvalidated)
    val_images: int = 0
    val_seconds: float = 0.0  # of ``seconds``, spent decoding and scoring the val set

    def selection(self) -> dict[str, object]:
        """Epochs run and cap, and, when validated, the model-selection record (build reports)."""
        out: dict[str, object] = {"epochs": self.epochs, "max_epochs": self.max_epochs}
        if self.val_bleu4:
            out.update(
                selected_epoch=self.selected_epoch,
                val_bleu4=[round(b, 6) for b in self.val_bleu4],
                val_images=self.val_images,
                val_seconds=round(self.val_seconds, 1),
            )
        return out


@dataclass(frozen=True)
class Validation:
    """A split's validation images: cached regions [N, R, D] and each image's reference captions."""

    regions: torch.Tensor
    references: Sequence[Sequence[str]]

    def __post_init__(self) -> None:
        if len(self.regions) != len(self.references) or len(self.regions) == 0:
            raise ValueError("validation needs one reference list per region set, and at least one image")


@torch.no_grad()
def greedy_captions(
    model: nn.Module, regions: torch.Tensor, vocab: Vocabulary, max_length: int, batch_size: int = 256
) -> list[str]:
    """Greedy decoding through the contract's ``init``/``step`` (so LSTM and Transformer captioners alike):
    one caption of at most ``max_length`` words per image of ``regions`` [N, R, D]."""
    was_training = model.training
    model.eval()
    texts: list[str] = []
    for start in range(0, len(regions), batch_size):
        memory, state = model.init(regions[start : start + batch_size])  # type: ignore[operator]
        n = memory.size(0)
        index = torch.arange(n)
        tokens = torch.full((n, max_length + 2), vocab.pad_id, dtype=torch.long)
        tokens[:, 0] = vocab.bos_id
        done = torch.zeros(n, dtype=torch.bool)
        for t in range(1, max_length + 2):
            logprobs, state, _ = model.step(  # type: ignore[operator]
                memory, index, tokens[:, :t], torch.full((n,), t, dtype=torch.long), state
            )
            word = logprobs.argmax(-1).masked_fill(done, vocab.pad_id)
            if t == max_length + 1:
                word = word.masked_fill(~done, vocab.eos_id)
            tokens[:, t] = word
            done |= word == vocab.eos_id
            if bool(done.all()):
                break
        texts.extend(vocab.decode(row[1:].tolist()) for row in tokens)
    model.train(was_training)
    return texts


def corpus_bleu4(references: Sequence[Sequence[str]], hypotheses: Sequence[str]) -> float:
    """Corpus BLEU-4 (pycocoevalcap, on ``service.evaluation.metrics.normalise``d text)."""
    from pycocoevalcap.bleu.bleu import Bleu

    gts = {i: [normalise(r) for r in refs] for i, refs in enumerate(references)}
    res = {i: [normalise(h)] for i, h in enumerate(hypotheses)}
    scores, _ = Bleu(4).compute_score(gts, res, verbose=0)
    return float(scores[3])


def validation_bleu4(model: nn.Module, val: Validation, vocab: Vocabulary, max_length: int) -> float:
    """Corpus BLEU-4 of greedy captions of the val images against their references."""
    return corpus_bleu4(val.references, greedy_captions(model, val.regions, vocab, max_length))


def _update(
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    loss: torch.Tensor,
    clip: Iterable[torch.Tensor] | None = None,
) -> None:
    """One optimisation step: backward, optional gradient-norm clipping at 2.0, step, schedule step."""
    optimizer.zero_grad()
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(clip, 2.0)
    optimizer.step()
    schedule.step()


def _logged(log: TrainLog, bar: Any, loss: torch.Tensor, **shown: str) -> None:
    """After a step: ``loss`` kept in ``log``; the progress bar shows ``shown`` (by default the loss)
    and advances."""
    log.losses.append(float(loss.detach()))
    bar.set_postfix(**(shown or {"loss": f"{float(loss):.3f}"}))
    bar.update()


def _batches(n: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def train_visual_encoder(
    images: np.ndarray, labels: dict[str, np.ndarray], label_sizes: dict[str, int], preset: Preset, seed: int
) -> tuple[VisualEncoder, TrainLog]:
    """images uint8 [N, H, W, 3]; labels name → int64 [N, g, g] (0 = none). Returns the frozen encoder."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    encoder = VisualEncoder(preset.encoder_channels, preset.region_dim, preset.grid, preset.image_size)
    heads = CellHeads(preset.region_dim, label_sizes)
    params = list(encoder.parameters()) + list(heads.parameters())
    optimizer = torch.optim.AdamW(params, lr=preset.encoder_learning_rate, weight_decay=1e-4)
    steps = preset.encoder_epochs * math.ceil(len(images) / preset.encoder_batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=preset.encoder_learning_rate, total_steps=steps
    )
    flat = {k: torch.from_numpy(v.reshape(len(v), -1)) for k, v in labels.items()}
    log, start = TrainLog(), time.perf_counter()
    encoder.train()
    with tqdm(total=steps, desc="visual_encoder", unit="batch") as bar:
        for _ in range(preset.encoder_epochs):
            for idx in _batches(len(images), preset.encoder_batch_size, rng):
                batch = torch.from_numpy(images[idx])
                if rng.random() < 0.5:  # horizontal flip: labels flip with the grid
                    batch = batch.flip(2)
                    targets = {
                        k: v[idx].view(len(idx), preset.grid, preset.grid).flip(2).reshape(len(idx), -1)
                        for k, v in flat.items()
                    }
                else:
                    targets = {k: v[idx] for k, v in flat.items()}
                logits = heads(encoder(batch))
                # object cells count OBJECT_CELL_WEIGHT times a background cell: most cells are background
                weight = 1.0 + (OBJECT_CELL_WEIGHT - 1.0) * (targets["noun"] > 0).float().flatten()
                loss = sum(
                    (
                        F.cross_entropy(logits[k].flatten(0, 1), targets[k].flatten(), reduction="none")
                        * weight
                    ).mean()
                    for k in logits
                )
                assert isinstance(loss, torch.Tensor)
                _update(optimizer, schedule, loss)
                _logged(log, bar, loss)
    encoder.eval()
    log.epochs, log.seconds = preset.encoder_epochs, time.perf_counter() - start
    log.max_epochs = preset.encoder_epochs
    with torch.no_grad():  # per-head accuracy on cells that hold an object, on the last 512 images
        sub = slice(max(0, len(images) - 512), len(images))
        logits = heads(encoder(torch.from_numpy(images[sub])))
        for k, v in logits.items():
            target = flat[k][sub]
            mask = target > 0
            log.extra[f"{k}_accuracy"] = float((v.argmax(-1)[mask] == target[mask]).float().mean())
    return encoder, log


@torch.no_grad()
def extract_regions(encoder: VisualEncoder, images: np.ndarray, batch_size: int = 256) -> torch.Tensor:
    """images uint8 [N, H, W, 3] → regions float32 [N, R, D] (cached for captioner training)."""
    encoder.eval()
    parts = [encoder(torch.from_numpy(images[i : i + batch_size])) for i in range(0, len(images), batch_size)]
    return torch.cat(parts)


def _caption_pairs(
    captions: Sequence[Sequence[str]], vocab: Vocabulary, max_length: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every (image, caption) pair: image index [P], tokens [P, max_length + 2], lengths [P] (BOS..EOS)."""
    image_ids = np.repeat(np.arange(len(captions)), [len(c) for c in captions])
    flat = [c for caps in captions for c in caps]
    tokens, lengths = encode_batch(vocab, flat, max_length)
    return torch.from_numpy(image_ids), torch.from_numpy(tokens), torch.from_numpy(lengths)


@dataclass(frozen=True)
class EpochSnapshot:
    """Where a captioner's training saves its whole state after every epoch (weights, optimiser and
    schedule, RNGs, GradNorm weights, best weights, log), and the key a saved state must carry to be
    resumed: a run cut off mid-model resumes at its last finished epoch, bit for bit."""

    path: Path
    key: str

    def load(self) -> dict[str, Any] | None:
        if not self.path.is_file():
            return None
        saved: dict[str, Any] = torch.load(self.path, map_location="cpu", weights_only=False)  # our own file
        return saved if saved.get("key") == self.key else None

    def save(self, state: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        torch.save({**state, "key": self.key}, tmp)
        os.replace(tmp, self.path)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def train_captioner(
    model: nn.Module,
    regions: torch.Tensor,
    captions: Sequence[Sequence[str]],
    vocab: Vocabulary,
    preset: Preset,
    seed: int,
    desc: str,
    rank: bool = False,
    learning_rate: float | None = None,
    val: Validation | None = None,
    snapshot: EpochSnapshot | None = None,
) -> TrainLog:
    """Teacher-forced cross-entropy for any captioner with ``forward(regions, tokens) -> logprobs``; with
    ``rank`` (BUTR) also the ranking loss of its ``image_embedding``/``text_embedding``, weighted by GradNorm
    on the shared language LSTM.

    At most ``preset.caption_epochs`` epochs (the one-cycle learning-rate schedule spans them). With ``val``,
    each epoch ends with the val set's greedy BLEU-4 (``validation_bleu4``); the model returns with the
    weights of the best epoch (the first of equals), and training stops once ``preset.patience`` epochs in
    a row did not improve on it. Without ``val`` the last epoch's weights are kept. With ``snapshot``,
    the state after every epoch is saved there, and a saved state is resumed from."""
    rng = np.random.default_rng(seed)
    lr = learning_rate or preset.learning_rate
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-5)
    image_ids, tokens, lengths = _caption_pairs(captions, vocab, preset.max_length)
    steps = preset.caption_epochs * math.ceil(len(tokens) / preset.batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    weights = torch.ones(2)  # GradNorm task weights [w_gen, w_rank]
    warmup = math.ceil(len(tokens) / preset.batch_size)  # one epoch of VSE0 before hardest negatives
    initial: torch.Tensor | None = None
    shared = model.get_parameter("language.weight_hh_l0") if rank else None  # the last layer both tasks share
    log, start = TrainLog(max_epochs=preset.caption_epochs), time.perf_counter()
    best: dict[str, torch.Tensor] | None = None
    first_epoch, done_steps, stopped, earlier_seconds = 1, 0, False, 0.0
    if snapshot is not None and (saved := snapshot.load()) is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        rng.bit_generator.state = saved["rng"]
        torch.set_rng_state(saved["torch_rng"])
        weights, initial, best, log = saved["weights"], saved["initial"], saved["best"], saved["log"]
        first_epoch, done_steps, stopped = saved["epoch"] + 1, saved["steps"], saved["stopped"]
        earlier_seconds = log.seconds
    model.train()
    with tqdm(total=steps, initial=done_steps, desc=desc, unit="batch") as bar:
        for epoch in range(first_epoch, preset.caption_epochs + 1):
            if stopped:
                break
            for idx in _batches(len(tokens), preset.batch_size, rng):
                width = int(lengths[idx].max())
                tok = tokens[idx, :width]
                reg = regions[image_ids[idx]]
                logprobs = model(reg, tok)
                target = tok[:, 1:]
                gen = F.nll_loss(logprobs.flatten(0, 1), target.flatten(), ignore_index=0)
                if shared is not None:
                    assert isinstance(model, BUTR), "the ranking loss needs BUTR's ranking head"
                    rnk = ranking_loss(
                        model.image_embedding(reg),
                        model.text_embedding(tok, lengths[idx] - 1),
                        not_negatives(image_ids[idx], tok),
                        preset.margin,
                        hardest=preset.hardest_negative_weight if bar.n >= warmup else 0.0,
                    )
                    losses = torch.stack([gen, rnk])
                    if initial is None:
                        initial = losses.detach().clone()
                    if bar.n % preset.gradnorm_every == 0:
                        weights = _gradnorm_update(weights, losses, initial, shared, preset.gradnorm_alpha)
                    loss = (weights * losses).sum()
                    log.extra["w_rank"] = float(weights[1])
                else:
                    loss = gen
                _update(optimizer, schedule, loss, clip=model.parameters())
                _logged(
                    log,
                    bar,
                    gen,
                    gen=f"{float(gen):.3f}",
                    **({"w_rank": f"{float(weights[1]):.2f}"} if rank else {}),
                )
            log.epochs = epoch
            if val is not None:
                t0 = time.perf_counter()
                bleu = validation_bleu4(model, val, vocab, preset.max_length)
                log.val_seconds += time.perf_counter() - t0
                log.val_bleu4.append(bleu)
                if log.selected_epoch is None or bleu > log.val_bleu4[log.selected_epoch - 1]:
                    log.selected_epoch, best = epoch, copy.deepcopy(model.state_dict())
                bar.write(
                    f"{desc} epoch {epoch}/{preset.caption_epochs}: val BLEU-4 {100 * bleu:.2f} "
                    f"(best {100 * log.val_bleu4[log.selected_epoch - 1]:.2f} at epoch {log.selected_epoch})"
                )
                stopped = epoch - log.selected_epoch >= preset.patience and epoch < preset.caption_epochs
            if snapshot is not None:
                log.seconds = earlier_seconds + time.perf_counter() - start
                snapshot.save(
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "schedule": schedule.state_dict(),
                        "rng": rng.bit_generator.state,
                        "torch_rng": torch.get_rng_state(),
                        "weights": weights,
                        "initial": initial,
                        "best": best,
                        "log": log,
                        "epoch": epoch,
                        "steps": bar.n,
                        "stopped": stopped,
                    }
                )
            if stopped:
                bar.write(f"{desc}: no val improvement for {preset.patience} epochs, stopping")
                bar.total = bar.n
                bar.refresh()
                break
    if best is not None:
        model.load_state_dict(best)
    if val is not None:
        log.val_images = len(val.regions)
    model.eval()
    log.seconds = earlier_seconds + time.perf_counter() - start
    return log


def _gradnorm_update(
    weights: torch.Tensor,
    losses: torch.Tensor,
    initial: torch.Tensor,
    shared: torch.Tensor,
    alpha: float,
    lr: float = 0.025,
) -> torch.Tensor:
    """One GradNorm step (Chen et al. 2018) on the task weights. G_i = w_i·‖∇_W L_i‖ is linear in w_i, so
    ∂|G_i − target_i|/∂w_i = sign(G_i − target_i)·‖∇_W L_i‖ with the target held constant; weights are then
    renormalised to sum to the number of tasks."""
    norms = torch.stack(
        [torch.autograd.grad(loss, shared, retain_graph=True)[0].norm() for loss in losses]
    ).detach()
    grads = weights * norms
    ratios = (losses.detach() / initial).clamp(min=1e-8)
    target = grads.mean() * (ratios / ratios.mean()) ** alpha
    updated = (weights - lr * torch.sign(grads - target) * norms / norms.mean().clamp(min=1e-12)).clamp(
        min=0.05
    )
    return updated * len(weights) / updated.sum()


class ExtraLoss(Protocol):
    """A term added to VSE++'s ranking loss at every step (``train_vsepp(extra=...)``)."""

    def __call__(
        self, model: VSEPP, pairs: np.ndarray, images: torch.Tensor, texts: torch.Tensor
    ) -> torch.Tensor:
        """The term for one batch: ``pairs`` int [B], the batch's rows of the (image, caption) pairs
        (``_caption_pairs`` order); ``images``, ``texts`` [B, J] their embeddings (L2-normalised)."""
        ...


def train_vsepp(
    regions: torch.Tensor,
    captions: Sequence[Sequence[str]],
    vocab: Vocabulary,
    preset: Preset,
    seed: int,
    *,
    desc: str = "vsepp",
    extra: ExtraLoss | None = None,
) -> tuple[VSEPP, TrainLog]:
    """A VSE++ ranker on ``regions`` [N, R, D] and their ``captions``: the hardest-negative ranking loss
    (VSE0 for the first epoch), plus ``extra``'s term where given; ``desc`` names the progress bar."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = VSEPP(len(vocab), regions.size(-1), preset.word_dim, preset.hidden_dim, preset.joint_dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=preset.ranker_learning_rate, weight_decay=1e-5)
    image_ids, tokens, lengths = _caption_pairs(captions, vocab, preset.max_length)
    warmup = math.ceil(len(tokens) / preset.batch_size)  # one epoch of VSE0 before hardest negatives
    steps = preset.ranker_epochs * warmup
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=preset.ranker_learning_rate, total_steps=steps
    )
    log, start = TrainLog(), time.perf_counter()
    model.train()
    with tqdm(total=steps, desc=desc, unit="batch") as bar:
        for _ in range(preset.ranker_epochs):
            for idx in _batches(len(tokens), preset.batch_size, rng):
                width = int(lengths[idx].max())
                images = model.image_embedding(regions[image_ids[idx]])
                texts = model.text_embedding(tokens[idx, :width], lengths[idx] - 1)
                loss = ranking_loss(
                    images,
                    texts,
                    not_negatives(image_ids[idx], tokens[idx, :width]),
                    preset.margin,
                    hardest=preset.hardest_negative_weight if bar.n >= warmup else 0.0,
                )
                if extra is not None:
                    loss = loss + extra(model, idx, images, texts)
                _update(optimizer, schedule, loss, clip=model.parameters())
                _logged(log, bar, loss)
    model.eval()
    log.epochs, log.seconds = preset.ranker_epochs, time.perf_counter() - start
    log.max_epochs = preset.ranker_epochs
    return model, log

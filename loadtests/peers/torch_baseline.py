"""The peer baseline of ``compcap bench --baseline torch``: what a user gets by wrapping the authors' own
PyTorch code in a web server instead of running CompCap.

One request at a time (a lock around the model), each decoded alone with a per-request beam search
in torch in the style of the authors' reference code (sgrvinod's Show-Attend-Tell ``caption_image_
beam_search``): ``k`` live beams, ``topk`` over the flattened scores, a beam leaves when it emits EOS
and ``k`` shrinks, at most ``max_length`` words; then the finished beams are ordered by the ranker's
cosine with the image (the CompCap default, ``rerank_weight`` 0). The models are the repository's
``torch.export`` programs (``ModelEntry.program``: the trained modules' graphs and weights, run
eagerly by torch, no onnxruntime), so the captioner and the ranker are the very ones the gateway
serves. FastAPI + uvicorn, one worker; the route is a plain ``def`` (FastAPI's thread pool), as a
user's would be.

Run: ``python -m loadtests.peers.torch_baseline --repo model_repo --port 8100``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from fastapi import FastAPI

from loadtests.peers.stand_in import per_request_app, serve, server_parser
from service.engine.runner import fixed_dim
from service.manifest import Manifest, load_manifest
from service.text.vocabulary import Vocabulary


@dataclass(frozen=True)
class Finished:
    tokens: list[int]  # the words, without BOS and EOS
    logprob: float  # summed log-probability, EOS included

    def normalized(self, length_penalty: float) -> float:
        return self.logprob / max(len(self.tokens), 1) ** length_penalty


def missing_programs(repo: Path, model: str | None = None, rerank: bool = True) -> list[str]:
    """The graphs the baseline needs whose torch program ``repo`` lacks (empty: it can run)."""
    manifest = load_manifest(repo)
    cap = manifest.captioner(model or manifest.default_captioner)
    names = ["visual_encoder", cap.init, cap.step]
    if rerank and cap.ranker:
        names += [manifest.ranker(cap.ranker).image, manifest.ranker(cap.ranker).text]
    return [n for n in names if (f := manifest.model(n).program) is None or not (Path(repo) / f).is_file()]


class TorchCaptioner:
    """A repository's encoder, captioner and ranker as torch programs, decoding one image at a time."""

    def __init__(self, repo: Path, model: str | None = None, rerank: bool = True) -> None:
        self.repo = Path(repo)
        self.manifest: Manifest = load_manifest(self.repo)
        self.vocab = Vocabulary.load(self.repo / "vocab.json")
        self.cap = self.manifest.captioner(model or self.manifest.default_captioner)
        self.ranker = self.manifest.ranker(self.cap.ranker) if rerank and self.cap.ranker else None
        names = ["visual_encoder", self.cap.init, self.cap.step]
        if self.ranker is not None:
            names += [self.ranker.image, self.ranker.text]
        self.programs = {name: self._load(name) for name in names}
        self.height, self.width = self.manifest.image.height, self.manifest.image.width
        self.last_token = self.cap.reads == "last_token"
        self.fixed_t = fixed_dim(self.manifest, self.cap.step, "tokens", 1)

    def _load(self, name: str) -> torch.nn.Module:
        program = self.manifest.model(name).program
        if program is None or not (self.repo / program).is_file():
            raise FileNotFoundError(
                f"{self.repo} has no torch program for {name}: `compcap-lab build` writes them "
                f"(a fresh clone's model_repo has the ONNX files only)"
            )
        return torch.export.load(str(self.repo / program)).module()

    @torch.no_grad()
    def caption(
        self,
        image: np.ndarray,
        beam_size: int = 5,
        max_length: int | None = None,
        length_penalty: float = 1.0,
    ) -> list[Finished]:
        """image uint8 [H, W, 3] → finished captions, best first (by the ranker when there is one)."""
        pixels = torch.from_numpy(np.ascontiguousarray(image)).float().unsqueeze(0)
        regions = self.programs["visual_encoder"](pixels)
        memory, state = self.programs[self.cap.init](regions)
        found = self.beam_search(memory, state, beam_size, max_length or self.cap.max_length)
        found.sort(key=lambda f: -f.normalized(length_penalty))
        found = found[:beam_size]
        if self.ranker is None or len(found) < 2:
            return found
        image_emb = self.programs[self.ranker.image](regions)  # [1, J]
        tokens, length = self._text_batch([f.tokens for f in found])
        text_emb = self.programs[self.ranker.text](tokens, length)  # [C, J]
        cosine = F.cosine_similarity(text_emb, image_emb, dim=-1)
        order = torch.argsort(-cosine, stable=True).tolist()
        return [found[i] for i in order]

    def beam_search(
        self, memory: torch.Tensor, state: torch.Tensor, beam_size: int, max_length: int
    ) -> list[Finished]:
        """memory [1, M, Dm], state [1, S] → up to ``beam_size`` finished beams (seed-style search)."""
        bos, eos, v = self.vocab.bos_id, self.vocab.eos_id, len(self.vocab)
        k = beam_size
        seqs = torch.full((1, 1), bos, dtype=torch.long)  # [k, t]: one live beam at first
        scores = torch.zeros(1)
        state = state.expand(1, -1)
        finished: list[Finished] = []
        for t in range(1, max_length + 2):
            logprobs, state_out = self._step(memory, seqs, state)  # [rows, V], [rows, S]
            if t == 1:
                logprobs[:, eos] = float("-inf")  # at least one word (the engine's min_length)
            if t > max_length:  # only EOS is allowed after max_length words
                keep = logprobs[:, eos].clone()
                logprobs.fill_(float("-inf"))
                logprobs[:, eos] = keep
            total = (scores.unsqueeze(1) + logprobs).view(-1)
            best, flat = total.topk(min(k, total.numel()))
            prev, word = flat // v, flat % v
            seqs = torch.cat([seqs[prev], word.unsqueeze(1)], dim=1)
            done = word == eos
            for row in done.nonzero().flatten().tolist():
                finished.append(Finished(seqs[row, 1:-1].tolist(), float(best[row])))
            live = ~done
            k -= int(done.sum())
            if k == 0:
                break
            seqs, scores, state = seqs[live], best[live], state_out[prev[live]]
        return finished

    def _step(
        self, memory: torch.Tensor, seqs: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows, t = seqs.shape
        if self.last_token:
            tokens, length = seqs[:, -1:], torch.ones(rows, dtype=torch.long)
        else:
            width = max(t, self.fixed_t or t)
            tokens = F.pad(seqs, (0, width - t), value=self.vocab.pad_id)
            length = torch.full((rows,), t, dtype=torch.long)
        index = torch.zeros(rows, dtype=torch.long)
        logprobs, state_out, _attention = self.programs[self.cap.step](memory, index, tokens, length, state)
        return logprobs, state_out

    def _text_batch(self, captions: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = 1 + max(len(c) for c in captions)
        tokens = torch.full((len(captions), width), self.vocab.pad_id, dtype=torch.long)
        tokens[:, 0] = self.vocab.bos_id
        for row, words in enumerate(captions):
            tokens[row, 1 : 1 + len(words)] = torch.tensor(words, dtype=torch.long)
        length = torch.tensor([[len(c) + 1] for c in captions], dtype=torch.long)
        return tokens, length


def create_app(captioner: TorchCaptioner) -> FastAPI:
    """The FastAPI app a user would write around ``captioner``: POST /v1/captions (multipart ``image``)."""

    def respond(found: list[Finished], n_best: int) -> dict[str, Any]:
        decode = captioner.vocab.decode
        captions = [{"caption": decode(f.tokens), "logprob": round(f.logprob, 4)} for f in found[:n_best]]
        return {"model": captioner.cap.name, "captions": captions}

    return per_request_app(
        "torch per-request baseline",
        prepare=lambda picture, _beam, _n: np.array(picture.resize((captioner.width, captioner.height))),
        caption=lambda array, beam_size, _n: captioner.caption(array, beam_size),
        respond=respond,
    )


def main(argv: list[str] | None = None) -> int:
    parser = server_parser("python -m loadtests.peers.torch_baseline", __doc__, port=8100)
    parser.add_argument("--repo", default="model_repo")
    parser.add_argument("--model", default=None)
    parser.add_argument("--no-rerank", action="store_true")
    args = parser.parse_args(argv)
    return serve(create_app(TorchCaptioner(Path(args.repo), args.model, rerank=not args.no_rerank)), args)


__all__ = ["Finished", "TorchCaptioner", "create_app", "main", "missing_programs"]

if __name__ == "__main__":
    raise SystemExit(main())

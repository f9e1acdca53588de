"""What the exemplar classifier learns from, and how its two readings mix: held-out checks.

The semantic stage decides by a classifier trained at start-up on the routes' exemplars
(routing/stages/semantic.py): a softmax over their embeddings, with the classifier priors'
points (SituatedQA's stable questions for `kiwix`, Banking77 requests for `none`), averaged
with a logistic regression over their words (routing/stages/word_classifier.py). This
script asks whether other training data or another mix would carry further, at the
classifier's own level: the argmax of the probabilities the stage reads, on labelled rows
the classifier never trains on, before the fitted confidence and the other stages.

Judged sets: SLURP devel and the Home Assistant intents tests (../shared/eval), SNIPS,
HWU64 and OpenTriviaQA (routing/fit_data), the Banking77 check rows (routing/fit_data/
staged), and SituatedQA's dev split (with --situatedqa). Variants:
- `shipped`: the classifier as the service builds it;
- `words+fit S`: the word half also learns routing/fit_data's rows at S times each label's
  exemplars' weight, every set judged by a fit without its own corpus (SLURP and HWU64
  are one corpus: routing/fitting/fit.py CORPUS_OF);
- `embedding+fit S`: the same rows as the embedding half's extra points (as priors are);
- `words+kiwix-prior` (with --situatedqa): the word half also learns the questions the
  `kiwix` prior was made from (SituatedQA train's stable ones), at the prior's share;
- `word share 0.3`, `geometric mean`: the two readings mixed otherwise;
- `no priors` and, with --contrastive N, `contrastive N`: MiniLM fine-tuned for N steps on
  the exemplars by a supervised contrastive loss (batches of 48 drawn evenly from the
  labels, temperature 0.1, AdamW at 2e-5), the classifier retrained on its embeddings
  without priors (they were made in the shipped model's space), so `no priors` is its
  baseline; `contrastive N + priors`: the same with the priors made again in its space
  from the questions they were made of (the `kiwix` one only with --situatedqa).
Each cell: accuracy on the set; then the mean over the sets. No row is printed.

    .venv/bin/python bench/classifier_variants.py [--situatedqa DIR] [--contrastive 400]
        [--save-model MODEL_DIR] [--config config.yaml] [--json-out PATH]

The fine-tuned encoder is judged at the pipeline level by hand: `--save-model MODEL_DIR`
keeps it; in a scratch clone, set `routing.semantic.model_path: MODEL_DIR` in config.yaml,
refit everything made in its embedding space there (`search fit --shipped --situatedqa
DIR`: the confidence weights, both priors, the time model), then run
`bench/routing_quality.py --no-sealed --isolated --eval-dir ../shared/eval` and
`bench/situatedqa_routing.py --situatedqa DIR` in it.

SituatedQA's repository states no licence: DIR is a local copy (a checkout or the git
directory `fetch` makes); only its dev split is judged here, and train's stable questions
feed the one variant that names them. Its test split is never read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.sealed_quality import stamp  # noqa: E402
from routing.fitting.fit import CORPUS_OF, Labelled, shipped_rows  # noqa: E402
from routing.stages.word_terms import mix  # noqa: E402

EVAL = ROOT.parent / "shared" / "eval"
FIT_DATA = ROOT / "routing" / "fit_data"
CHECK_ROWS = FIT_DATA / "staged" / "banking77_check.jsonl"
FIT_SHARES = (0.5, 1.0)
CONTRASTIVE_BATCH = 48
CONTRASTIVE_TEMPERATURE = 0.1
CONTRASTIVE_RATE = 2e-5
SEED = 0


@dataclass(frozen=True, slots=True)
class JudgedSet:
    """Labelled rows the classifier is judged on, and the fit corpus they come from (None:
    no fit corpus; such a set is judged by every fit)."""

    name: str
    corpus: str | None
    rows: tuple[tuple[str, str], ...]  # (text, route)


def single_rows(path: Path) -> tuple[tuple[str, str], ...]:
    """(text, route) of a JSONL file's single-route rows (`expected` or `route`)."""
    found = []
    for line in path.read_text("utf-8").splitlines():
        if line.strip():
            data = json.loads(line)
            route = data.get("expected", data.get("route"))
            if isinstance(route, str):
                found.append((data["text"], route))
    return tuple(found)


def judged_sets(eval_dir: Path, situatedqa: Path | None) -> list[JudgedSet]:
    sets = [
        JudgedSet("slurp", CORPUS_OF["slurp_devel"], single_rows(eval_dir / "slurp_devel.jsonl")),
        JudgedSet("snips", CORPUS_OF["snips"], single_rows(FIT_DATA / "snips.jsonl")),
        JudgedSet("hwu64", CORPUS_OF["hwu64"], single_rows(FIT_DATA / "hwu64.jsonl")),
        JudgedSet(
            "ha",
            CORPUS_OF["ha_intents_tests"],
            single_rows(eval_dir / "ha_intents_tests.jsonl"),
        ),
        JudgedSet(
            "opentriviaqa", CORPUS_OF["opentriviaqa"], single_rows(FIT_DATA / "opentriviaqa.jsonl")
        ),
        JudgedSet("banking77", None, tuple((text, "none") for text, _ in single_rows(CHECK_ROWS))),
    ]
    if situatedqa is not None:
        from routing.fitting.time_fit import read_situatedqa

        questions = read_situatedqa(situatedqa, "dev")
        rows = tuple((q.text, "web" if q.sensitive else "kiwix") for q in questions)
        sets.append(JudgedSet("situatedqa_dev", None, rows))
    return sets


def fit_rows_without(rows: Sequence[Labelled], corpus: str | None) -> list[Labelled]:
    """The fit rows a set from `corpus` may be judged by: none of its own corpus's."""
    return [row for row in rows if row.corpus != corpus]


def accuracy(
    probabilities: np.ndarray, labels: Sequence[str], rows: Sequence[tuple[str, str]]
) -> float:
    """The share of rows whose most probable label is their route."""
    if not len(rows):
        return 0.0
    predicted = np.asarray(labels)[probabilities.argmax(axis=1)]
    return float(np.mean(predicted == np.asarray([route for _, route in rows])))


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def word_half(
    groups: Mapping[str, Sequence[str]],
    extra: Mapping[str, Sequence[tuple[Sequence[str], float]]],
) -> Callable[[Sequence[str]], np.ndarray]:
    """The word half as the service trains it (routing/stages/word_classifier.py), with
    each label's `extra` rows at their share of its exemplars' weight; it reads texts into
    a (texts, labels) matrix of probabilities, labels in `groups`' order."""
    from routing.stages.word_classifier import WordClassifier

    fitted = WordClassifier.fit(groups, extra)
    labels = list(groups)

    def read(texts: Sequence[str]) -> np.ndarray:
        found = [fitted.probabilities(text) for text in texts]
        return np.asarray([[p[label] for label in labels] for p in found])

    return read


class Variants:
    """The shipped classifier's parts, and the held-out sets read once by each."""

    def __init__(self, stage: Any, sets: Sequence[JudgedSet], fit_rows: Sequence[Labelled]) -> None:
        from routing.stages.classifier_prior import unserved_texts

        index = stage.index
        ends = [*index.starts[1:], len(index.texts)]
        self.labels: list[str] = list(index.labels)
        self.groups = {
            label: list(index.texts[start:end])
            for label, start, end in zip(index.labels, index.starts, ends, strict=True)
        }
        self.index = index
        self.classifier = stage.classifier
        self.sets = list(sets)
        self.fit_rows = list(fit_rows)
        self.unserved = unserved_texts()
        encode = stage.embedder.encode_exemplars
        self.vectors = {s.name: encode([text for text, _ in s.rows]) for s in self.sets}
        self.fit_vectors = encode([row.text for row in self.fit_rows])

    def shipped_extra(self) -> dict[str, list[tuple[Sequence[str], float]]]:
        """The word half's extra rows as the service trains it (the `none` prior's)."""
        extra: dict[str, list[tuple[Sequence[str], float]]] = {}
        for prior in self.classifier.priors:
            if prior.label == "none":
                extra["none"] = [(self.unserved, prior.share)]
        return extra

    def embedding(
        self, classifier: Any, name: str, vectors: np.ndarray | None = None
    ) -> np.ndarray:
        x = self.vectors[name] if vectors is None else vectors
        return softmax_rows(x @ classifier.w + classifier.b)

    def word_half(
        self, extra: Mapping[str, Sequence[tuple[Sequence[str], float]]]
    ) -> Callable[[JudgedSet], np.ndarray]:
        """A word half trained with `extra`, as a reader of judged sets."""
        read = word_half(self.groups, extra)
        return lambda judged: read([text for text, _ in judged.rows])

    def scored(self, probabilities: Callable[[JudgedSet], np.ndarray]) -> dict[str, float]:
        return {s.name: accuracy(probabilities(s), self.labels, s.rows) for s in self.sets}


def run(
    variants: Variants,
    kiwix_questions: Sequence[str],
    contrastive: int,
    save_to: Path | None = None,
) -> dict[str, dict[str, float]]:
    from routing.stages.classifier_prior import ClassifierPrior
    from routing.stages.semantic import LabelClassifier
    from routing.stages.word_classifier import WORD_SHARE

    v = variants
    shipped_extra = v.shipped_extra()
    read_shipped = v.word_half(shipped_extra)
    shipped_words = {s.name: read_shipped(s) for s in v.sets}
    embedded = {s.name: v.embedding(v.classifier, s.name) for s in v.sets}
    found: dict[str, dict[str, float]] = {}
    found["shipped"] = v.scored(lambda s: mix(embedded[s.name], shipped_words[s.name], WORD_SHARE))

    for share in FIT_SHARES:

        def with_fit_words(s: JudgedSet, share: float = share) -> np.ndarray:
            extra = {label: list(rows) for label, rows in shipped_extra.items()}
            for label in v.labels:
                texts = [r.text for r in fit_rows_without(v.fit_rows, s.corpus) if r.route == label]
                extra.setdefault(label, []).append((texts, share))
            return mix(embedded[s.name], v.word_half(extra)(s), WORD_SHARE)

        found[f"words+fit {share:g}"] = v.scored(with_fit_words)

    probe = v.classifier.priors[0].probe_vector if v.classifier.priors else None
    for share in FIT_SHARES:
        trained: dict[str | None, Any] = {}

        def with_fit_points(
            s: JudgedSet, share: float = share, trained: dict[str | None, Any] = trained
        ) -> np.ndarray:
            if s.corpus not in trained:
                priors = list(v.classifier.priors)
                kept = [i for i, r in enumerate(v.fit_rows) if r.corpus != s.corpus]
                for label in v.labels:
                    rows = [i for i in kept if v.fit_rows[i].route == label]
                    if rows and probe is not None:
                        points = v.fit_vectors[rows]
                        priors.append(
                            ClassifierPrior(label, points, np.ones(len(rows)), share, probe)
                        )
                trained[s.corpus] = LabelClassifier(v.index, priors=priors)
            return mix(v.embedding(trained[s.corpus], s.name), shipped_words[s.name], WORD_SHARE)

        found[f"embedding+fit {share:g}"] = v.scored(with_fit_points)

    if kiwix_questions:
        kiwix_share = next((p.share for p in v.classifier.priors if p.label == "kiwix"), 1.0)
        extra: dict[str, list[tuple[Sequence[str], float]]] = {
            **shipped_extra,
            "kiwix": [(list(kiwix_questions), kiwix_share)],
        }
        read_kiwix = v.word_half(extra)
        found["words+kiwix-prior"] = v.scored(
            lambda s: mix(embedded[s.name], read_kiwix(s), WORD_SHARE)
        )

    found["word share 0.3"] = v.scored(lambda s: mix(embedded[s.name], shipped_words[s.name], 0.3))

    def geometric(s: JudgedSet) -> np.ndarray:
        pooled = np.sqrt(embedded[s.name] * shipped_words[s.name])
        return pooled / pooled.sum(axis=1, keepdims=True)

    found["geometric mean"] = v.scored(geometric)

    bare = LabelClassifier(v.index)
    found["no priors"] = v.scored(
        lambda s: mix(v.embedding(bare, s.name), shipped_words[s.name], WORD_SHARE)
    )
    if contrastive > 0:
        encode = fine_tuned(v.groups, contrastive, save_to)
        from routing.stages.semantic import ExemplarIndex

        texts = [text for label in v.labels for text in v.groups[label]]
        tuned = LabelClassifier(ExemplarIndex(v.groups, encode(texts)))
        vectors = {s.name: encode([text for text, _ in s.rows]) for s in v.sets}
        found[f"contrastive {contrastive}"] = v.scored(
            lambda s: mix(
                v.embedding(tuned, s.name, vectors[s.name]), shipped_words[s.name], WORD_SHARE
            )
        )
        rebuilt = LabelClassifier(
            ExemplarIndex(v.groups, encode(texts)),
            priors=rebuilt_priors(v.classifier.priors, encode, v.unserved, kiwix_questions),
        )
        found[f"contrastive {contrastive} + priors"] = v.scored(
            lambda s: mix(
                v.embedding(rebuilt, s.name, vectors[s.name]), shipped_words[s.name], WORD_SHARE
            )
        )
    return found


def rebuilt_priors(
    priors: Sequence[Any],
    encode: Callable[[list[str]], np.ndarray],
    unserved: Sequence[str],
    kiwix_questions: Sequence[str],
) -> list[Any]:
    """The shipped priors made again, as routing/fitting/prior_fit.py makes them, from the
    questions they were made of, embedded by `encode` (a prior whose questions are not at
    hand, the `kiwix` one without --situatedqa, is left out)."""
    from routing.fitting.prior_fit import fit_points
    from routing.stages.classifier_prior import PROBE

    made = []
    probe = encode([PROBE])[0]
    for prior in priors:
        questions = {"none": unserved, "kiwix": kiwix_questions}.get(prior.label, ())
        if questions:
            vectors = encode(list(questions))
            made.append(fit_points(vectors, probe, prior.label, prior.share, "rebuilt"))
    return made


def fine_tuned(
    groups: Mapping[str, Sequence[str]], steps: int, save_to: Path | None = None
) -> Callable[[list[str]], np.ndarray]:
    """MiniLM fine-tuned on the exemplars by a supervised contrastive loss; its encoder.
    `save_to`: also saved there as a sentence-transformers model directory."""
    import torch
    from sentence_transformers import SentenceTransformer

    from routing.stages.embedder import default_model_path

    torch.manual_seed(SEED)
    draw = random.Random(SEED)
    model = SentenceTransformer(default_model_path(), device="cpu")
    per_label = CONTRASTIVE_BATCH // len(groups)
    by_label = [list(texts) for texts in groups.values()]
    optimiser = torch.optim.AdamW(model.parameters(), lr=CONTRASTIVE_RATE)
    model.train()
    for _ in range(steps):
        batch = [
            (text, k)
            for k, texts in enumerate(by_label)
            for text in draw.sample(texts, min(per_label, len(texts)))
        ]
        features = model.preprocess([text for text, _ in batch])
        z = torch.nn.functional.normalize(model(features)["sentence_embedding"], dim=1)
        y = torch.tensor([k for _, k in batch])
        itself = torch.eye(len(y), dtype=torch.bool)
        similarity = (z @ z.T / CONTRASTIVE_TEMPERATURE).masked_fill(itself, -1e9)
        positive = (y[:, None] == y[None, :]) & ~itself
        log_p = similarity - torch.logsumexp(similarity, dim=1, keepdim=True)
        loss = (-(log_p * positive).sum(1) / positive.sum(1).clamp(min=1)).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()
    if save_to is not None:
        model.save(str(save_to))
    return lambda texts: model.encode(
        texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True
    )


def render(found: Mapping[str, Mapping[str, float]], header: str) -> list[str]:
    names = list(next(iter(found.values())))
    lines = [header, f"{'variant':<26}" + "".join(f"{n[:14]:>15}" for n in names) + f"{'mean':>9}"]
    for variant, scores in found.items():
        cells = "".join(f"{scores[n]:>15.3f}" for n in names)
        lines.append(f"{variant:<26}{cells}{np.mean(list(scores.values())):>9.4f}")
    return lines


async def measure(
    config_path: Path,
    eval_dir: Path,
    situatedqa: Path | None,
    contrastive: int,
    save_to: Path | None = None,
) -> dict[str, Any]:
    from search.config import load_config
    from search.service import Service

    sets = judged_sets(eval_dir, situatedqa)
    kiwix_questions: list[str] = []
    if situatedqa is not None:
        from routing.fitting.prior_fit import stable_questions
        from routing.fitting.time_fit import read_situatedqa

        kiwix_questions = [q.text for q in stable_questions(read_situatedqa(situatedqa, "train"))]
    service = Service(load_config(str(config_path)), household=None)
    await service.start(sources=False)
    try:
        stage: Any = service.resolver.stage("intent_semantic")
        if stage is None or stage.classifier is None:
            raise SystemExit("the config has no semantic classifier to judge")
        variants = Variants(stage, sets, shipped_rows())
    finally:
        await service.aclose()
    started = time.monotonic()
    found = run(variants, kiwix_questions, contrastive, save_to)
    return {
        "sets": {s.name: len(s.rows) for s in sets},
        "accuracy": found,
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument("--eval-dir", default=str(EVAL))
    parser.add_argument("--situatedqa", default="", help="checkout or git dir of SituatedQA")
    parser.add_argument("--contrastive", type=int, default=0, help="fine-tuning steps (0: none)")
    parser.add_argument("--save-model", default="", help="with --contrastive: save it here")
    parser.add_argument("--json-out", default="", help="also write the figures, dated, here")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.contrastive < 0:
        print("--contrastive: a number of steps, 0 or more", file=sys.stderr)
        return 2
    if args.save_model and not args.contrastive:
        print("--save-model: only with --contrastive N", file=sys.stderr)
        return 2
    situatedqa = Path(args.situatedqa) if args.situatedqa else None
    save_to = Path(args.save_model) if args.save_model else None
    for label, path in (("--config", Path(args.config)), ("--eval-dir", Path(args.eval_dir))):
        if not path.exists():
            print(f"{label}: no such path {path}", file=sys.stderr)
            return 2
    try:
        figures = asyncio.run(
            measure(Path(args.config), Path(args.eval_dir), situatedqa, args.contrastive, save_to)
        )
    except FileNotFoundError as error:
        print(f"classifier_variants: {error}", file=sys.stderr)
        return 2
    sizes = ", ".join(f"{name} {count}" for name, count in figures["sets"].items())
    print("\n".join(render(figures["accuracy"], f"{stamp()} classifier argmax accuracy ({sizes})")))
    print(f"the variants took {figures['seconds']} s after the model load")
    if args.json_out:
        from bench.results import write

        command = "python bench/classifier_variants.py"
        if situatedqa is not None:
            command += " --situatedqa DIR"
        if args.contrastive:
            command += f" --contrastive {args.contrastive}"
        write(
            args.json_out, "classifier_variants", command + f" --json-out {args.json_out}", figures
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

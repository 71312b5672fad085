"""Fine-tuning a LoRA adapter of the job's model on its gold rows' samples (``adapter_samples``).

Cues are options from a fixed vocabulary: once they are set, more gold teaches them nothing. An adapter keeps
learning from more gold. It is trained cheaply enough for 2 CPU cores: rank ``RANK`` on the attention projections
only, one sample a step, the loss on the answer's tokens only, few epochs, and early stopping on held-out rows.

Held-out field accuracy is read under teacher forcing, from the same forward as the held-out loss: a field is right
where the model's likeliest next token is the answer's at every token of its value, given the answer before it.
That is what greedy decoding writes for the field once the record before it is right, at the cost of one forward a
sample rather than a decode.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from tqdm import tqdm

from .adapter_samples import Sample

log = logging.getLogger(__name__)

#: Why 8: the rank LoRA's authors found enough for adapting attention; the adapter stays a few MB and trains fast.
RANK = 8
#: The projections that are adapted: attention only (Llama, Gemma, Qwen and most decoder models name them so).
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")


def adapter_path(learned: Path) -> Path:
    """Where ``learn adapter=true`` saves the adapter beside the cues file ``learned``."""
    return learned.with_name(f"{learned.stem}-adapter")


@dataclass(frozen=True, kw_only=True)
class Training:
    """How an adapter trains: most ``epochs``, stopped after ``patience`` epochs without a lower held-out loss."""

    epochs: int = 6  # Why 6: one sample a gold row, so 40 rows are 40 steps an epoch; early stopping ends most sooner
    patience: int = 1
    learning_rate: float = 5e-4  # Why 5e-4: LoRA's usual range is 1e-4 to 1e-3; a few hundred steps need its upper half
    rank: int = RANK
    alpha: int = 2 * RANK  # Why twice the rank: peft's and LoRA's usual scale
    seed: int = 0


@dataclass(frozen=True)
class Score:
    """Mean loss over the answers' tokens, and the share of fields right under teacher forcing."""

    loss: float
    accuracy: float


def train(
    model: torch.nn.Module,
    train_set: Sequence[Sample],
    held_out: Sequence[Sample],
    training: Training = Training(),
    report: Callable[[str], None] = log.info,
) -> tuple[Any, dict[str, Any]]:
    """``model`` with a LoRA adapter trained on ``train_set``, the one of the epoch with the lowest loss on
    ``held_out``; and the evidence: the samples, each epoch's losses and accuracy, held-out accuracy before and
    after. ``report`` gets one line an epoch."""
    from peft import LoraConfig, get_peft_model

    if not train_set or not held_out:
        raise ValueError(f"an adapter needs samples to train on and held-out ones to stop on: {len(train_set)} and {len(held_out)} given")
    torch.manual_seed(training.seed)
    config = LoraConfig(r=training.rank, lora_alpha=training.alpha, lora_dropout=0.0, target_modules=list(TARGET_MODULES), task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=training.learning_rate)
    started = time.perf_counter()
    before = score(peft_model, held_out)
    report(f"adapter: before training, held-out loss {before.loss:.3f}, field accuracy {before.accuracy:.3f} (teacher-forced)")
    best, best_epoch, best_state, epochs, order = before, 0, _state(peft_model), [], list(range(len(train_set)))
    shuffler = random.Random(training.seed)
    for epoch in range(1, training.epochs + 1):
        shuffler.shuffle(order)
        loss = _epoch(peft_model, optimizer, [train_set[i] for i in order], f"adapter epoch {epoch}/{training.epochs}")
        held = score(peft_model, held_out)
        epochs.append({"epoch": epoch, "loss": round(loss, 4), "held_out_loss": round(held.loss, 4), "held_out_accuracy": round(held.accuracy, 4)})
        report(f"adapter: epoch {epoch}: loss {loss:.3f}, held-out loss {held.loss:.3f}, field accuracy {held.accuracy:.3f}")
        if held.loss < best.loss:
            best, best_epoch, best_state = held, epoch, _state(peft_model)
        elif epoch - best_epoch >= training.patience:
            break
    _restore(peft_model, best_state)
    evidence = {
        "samples": {"train": len(train_set), "held_out": len(held_out)},
        "rows": {"train": len({s.row_id for s in train_set}), "held_out": len({s.row_id for s in held_out})},
        "training": asdict(training),
        "epochs": epochs,
        "kept_epoch": best_epoch,
        "held_out_accuracy": {"before": round(before.accuracy, 4), "after": round(best.accuracy, 4)},
        "held_out_loss": {"before": round(before.loss, 4), "after": round(best.loss, 4)},
        "accuracy_is": "teacher-forced: a field is right where the likeliest token is the answer's at each token of its value",
        "seconds": round(time.perf_counter() - started, 1),
    }
    return peft_model, evidence


def score(model: torch.nn.Module, held_out: Sequence[Sample]) -> Score:
    """``model``'s mean answer-token loss over ``held_out`` and its share of fields right (teacher forcing)."""
    model.eval()
    losses, right, fields = [], 0, 0
    with torch.no_grad():
        for sample in held_out:
            loss, hits = _forward(model, sample)
            losses.append(loss.item())
            right, fields = right + sum(hits), fields + len(hits)
    return Score(sum(losses) / len(losses), right / fields if fields else 0.0)


def _epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, samples: list[Sample], title: str) -> float:
    """One pass over ``samples``, a step each; their mean loss."""
    model.train()
    total = 0.0
    bar = tqdm(samples, desc=title, unit="row", dynamic_ncols=True, leave=False)
    for i, sample in enumerate(bar, 1):
        loss, _ = _forward(model, sample)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
        bar.set_postfix(loss=f"{total / i:.3f}")
    return total / len(samples)


def _forward(model: torch.nn.Module, sample: Sample) -> tuple[torch.Tensor, list[bool]]:
    """The loss over ``sample``'s answer tokens, and whether each of its fields is right under teacher forcing."""
    device = next(model.parameters()).device
    ids = torch.tensor([sample.prompt + sample.target], device=device)
    logits = model(input_ids=ids).logits[0, len(sample.prompt) - 1 : -1].float()
    target = ids[0, len(sample.prompt) :]
    loss = torch.nn.functional.cross_entropy(logits, target)
    right = (logits.argmax(-1) == target).tolist()
    return loss, [all(right[start:end]) for start, end in sample.fields.values()]


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def _restore(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in state:
                p.copy_(state[name])

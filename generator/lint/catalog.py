"""Every rule with its code and message, and ``check``: one parsed file's findings."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .rules import (
    Finding,
    Hit,
    Source,
    cuda_call,
    dot_data,
    eval_loop,
    legacy_constructor,
    module_list,
    unregistered_tensor,
    unsafe_load,
    whole_module_save,
)
from .training import evaluation_in_training_mode, loss_summed_with_graph, unseeded_script


@dataclass(frozen=True)
class Rule:
    code: str
    message: str  # the finding's message, unless the rule yields a Hit with its own
    find: Callable[[Source], Iterator[ast.AST | Hit]]


RULES = (
    Rule("TSC101", ".data bypasses autograd; use .detach() (P5)", dot_data),
    Rule(
        "TSC102",
        "legacy tensor constructor; use torch.as_tensor/torch.from_numpy, or torch.tensor with a dtype (P2)",
        legacy_constructor,
    ),
    Rule("TSC103", ".cuda() call; choose one torch.device and move with .to(device) (P6)", cuda_call),
    Rule("TSC104", "torch.load needs map_location and weights_only=True (P7)", unsafe_load),
    Rule("TSC105", "torch.save of a whole module pickles it; save its state_dict() (P7)", whole_module_save),
    Rule(
        "TSC106",
        "Python list or dict of modules is not registered; use nn.ModuleList or nn.ModuleDict (P4)",
        module_list,
    ),
    Rule(
        "TSC107",
        "tensor attribute set in __init__ does not follow .to() nor enter state_dict; use register_buffer (P9)",
        unregistered_tensor,
    ),
    Rule("TSC108", "loop calls a model after .eval() without torch.no_grad()/inference_mode() (P11)", eval_loop),
    Rule(
        "TSC109",
        "evaluation loop calls a model left in training mode; call model.eval() before it (P11)",
        evaluation_in_training_mode,
    ),
    Rule(
        "TSC110",
        "training script never seeds torch; call torch.manual_seed or a seed_everything helper first (P3)",
        unseeded_script,
    ),
    Rule(
        "TSC111",
        "loss summed across steps keeps every step's graph alive; add loss.item() or loss.detach() (P5)",
        loss_summed_with_graph,
    ),
)


def check(tree: ast.Module) -> list[Finding]:
    """Every rule's findings in one parsed file, in source order."""
    src = Source.of(tree)
    findings = set()
    for rule in RULES:
        for found in rule.find(src):
            node, message = found if isinstance(found, Hit) else (found, rule.message)
            findings.add(Finding(node.lineno, node.col_offset, f"{rule.code} {message}"))  # type: ignore[attr-defined]
    return sorted(findings)

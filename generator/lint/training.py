"""The training loop's own mistakes: evaluation in training mode, an unseeded script, a loss summed with its graph.

Like the rules in ``rules``, each reads syntax only and prefers silence to a
false alarm; each docstring says what it matches and what it lets pass.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from .rules import MODULE_NAME, Scope, Source, assignments, is_method_call, last_identifier

# A function whose name says it evaluates: validate, evaluate, val_epoch, run_eval, predict, inference, test
# (alone or last: pytest's test_* functions are not evaluation loops), test_epoch...
EVALUATING = re.compile(
    r"(^|_)(eval|evaluate|evaluation|evaluating|val|valid|validate|validation|validating|predict|prediction|"
    r"infer|inference)(_|$)|(^|_)test$|^test_(epoch|loop|step|one_epoch)$",
    re.IGNORECASE,
)
# ``build_model(...)``, ``load_model(...)``: functions that make a model, not models.
MAKES_A_MODEL = re.compile(r"^(build|make|create|get|load|init|new|setup|wrap)_", re.IGNORECASE)
# Seeding calls that leave torch's generator unseeded: Python's and NumPy's global generators.
NOT_TORCH_SEEDING = frozenset({"random.seed", "numpy.random.seed"})
# Where ``manual_seed`` seeds torch's global generators (elsewhere it is a ``torch.Generator``'s own).
GLOBAL_MANUAL_SEED = frozenset({"torch", "torch.random", "torch.cuda"})
# What turns a loss into a number or a tensor without a graph.
LEAVES_THE_GRAPH = frozenset({"item", "detach", "tolist", "numpy"})
TO_NUMBER = frozenset({"float", "int", "round"})
LOSS = re.compile(r"loss|criterion", re.IGNORECASE)
# torch.nn.functional's losses: cross_entropy, nll_loss, mse_loss, kl_div, margin_ranking_loss...
FUNCTIONAL_LOSS = re.compile(r"loss|entropy|kl_div", re.IGNORECASE)


def model_called(src: Source, call: ast.Call, built: set[str]) -> str | None:
    """The model a call runs, as written (``model``, ``self.net``; ``model.forward(x)`` is ``model``), or None.

    A model is a name or attribute ending in model, module, net, network, encoder, decoder, backbone or
    classifier, or a name this file assigned from a module constructor; not a function that builds one.
    """
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "forward":
        func = func.value
    if not isinstance(func, (ast.Name, ast.Attribute)) or (src.name(func) or "").startswith("torch."):
        return None
    leaf = last_identifier(func)
    if (MODULE_NAME.search(leaf) and not MAKES_A_MODEL.match(leaf)) or (isinstance(func, ast.Name) and leaf in built):
        return ast.unparse(func)
    return None


def models_built(src: Source) -> set[str]:
    return {
        target.id
        for target, value in assignments(src.nodes)
        if isinstance(target, ast.Name) and src.is_module_call(value)
    }


def switched(scope: Scope, model: str, position: tuple[int, int]) -> bool:
    """Whether ``model`` (or a module holding it: ``model`` for ``model.module``) was switched before ``position``."""
    return any(
        switch.where < position and (model == switch.model or model.startswith(switch.model + "."))
        for switch in scope.switches
    )


def evaluated_by_every_caller(src: Source, function: ast.AST) -> bool:
    """Whether this file calls ``function`` and puts a model in eval mode before each call, in the caller."""
    name = getattr(function, "name", None)
    calls = [
        (scope, node)
        for scope in src.scopes
        for node, _, _ in scope.visits
        if isinstance(node, ast.Call) and name and last_identifier(node.func) == name
    ]
    return bool(calls) and all(
        any(switch.is_eval and switch.where < (call.lineno, call.col_offset) for switch in scope.switches)
        for scope, call in calls
    )


def passed_to_evaluation(scope: Scope, model: str, position: tuple[int, int]) -> bool:
    """Whether ``model`` went to a function named for evaluation (``evaluate(model, loader)``) before ``position``:
    that function switches it (this rule checks it does where this file defines it)."""
    return any(
        isinstance(node, ast.Call)
        and EVALUATING.search(last_identifier(node.func))
        and (node.lineno, node.col_offset) < position
        and any(ast.unparse(arg) == model for arg in node.args)
        for node, _, _ in scope.visits
    )


def parameters(function: ast.AST) -> set[str]:
    """The names a function receives, less ``self`` and ``cls`` (``self.model`` is the object's own model)."""
    arguments = getattr(function, "args", None)
    if arguments is None:
        return set()
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return {argument.arg for argument in every} - {"self", "cls"}


def evaluation_in_training_mode(src: Source) -> Iterator[ast.AST]:
    """A loop that evaluates a model never switched to eval mode: dropout stays on, batch norm keeps learning.

    The loop counts as evaluation when it runs in a function named for it (``validate``, ``evaluate``,
    ``val_epoch``, ``predict``, ``test``...), or under ``torch.no_grad()``/``inference_mode()`` (a ``with`` or a
    decorator) with a model the function did not receive as a parameter (a script's ``model``, ``self.model``):
    a helper that takes a model and runs it without gradients (``embed(model, loader)``) leaves its mode to
    the caller. The loop must call a model (``model(x)``, ``self.net(x)``, ``model.forward(x)``), and is
    reported when that function has
    no ``.eval()``, ``.train(...)`` nor ``m = model.eval()`` of that model before the call: any switch, a
    training one included (``update_bn`` runs training mode under ``no_grad`` on purpose), is a choice made in
    view; so is a model passed to an evaluating function first (``evaluate(model, ...)``). A function this file
    calls only after a ``.eval()`` is left alone. Reported once, at the innermost loop.
    """
    built = models_built(src)
    for scope in src.scopes:
        named = bool(EVALUATING.search(getattr(scope.node, "name", "")))
        received = parameters(scope.node)
        reported: set[int] = set()
        for node, no_grad, loop in scope.visits:
            if loop is None or id(loop) in reported or not (no_grad or named) or not isinstance(node, ast.Call):
                continue
            model = model_called(src, node, built)
            if model is None or not (named or model.partition(".")[0] not in received):
                continue
            position = (node.lineno, node.col_offset)
            if switched(scope, model, position) or passed_to_evaluation(scope, model, position):
                continue
            if scope.node is not src.tree and evaluated_by_every_caller(src, scope.node):
                continue
            reported.add(id(loop))
            yield loop


def seeds_torch(src: Source, call: ast.Call) -> bool:
    """``torch.manual_seed``, a seeding helper (``seed_everything``, ``set_seed``, ``seed_all``...), not
    ``random.seed``, ``np.random.seed`` nor a ``torch.Generator``'s own ``manual_seed``."""
    name = src.name(call.func) or last_identifier(call.func)
    owner, _, leaf = name.rpartition(".")
    if "seed" not in leaf.lower() or name in NOT_TORCH_SEEDING:
        return False
    return not leaf.startswith("manual_seed") or owner in GLOBAL_MANUAL_SEED


def is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":``"""
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def runs_when_executed(src: Source) -> bool:
    """A script: a ``__main__`` guard, a top-level call of a function of this file (``main()``), or top-level
    code that calls ``.backward()``; a module of functions that other code imports is none of these."""
    defined = {node.name for node in src.tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for statement in src.tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if is_main_guard(statement):
            return True
        call = statement.value if isinstance(statement, ast.Expr) else None
        if isinstance(call, ast.Call) and last_identifier(call.func) in defined:
            return True
        if any(is_method_call(node, "backward") for node in ast.walk(statement)):
            return True
    return False


def unseeded_script(src: Source) -> Iterator[ast.AST]:
    """A training script (``.backward()`` and ``.step()`` calls, and code that runs when the file is executed:
    ``runs_when_executed``) with no call that seeds torch (``seeds_torch``) anywhere in the file. Reported at
    the first ``.backward()``. A module of training functions (a project's ``engine.py``) is not a script: the
    project seeds where the run starts."""
    backward = [node for node in src.nodes if is_method_call(node, "backward")]
    if not backward or not any(is_method_call(node, "step") for node in src.nodes):
        return
    if any(isinstance(node, ast.Call) and seeds_torch(src, node) for node in src.nodes):
        return
    if runs_when_executed(src):
        yield min(backward, key=lambda node: (node.lineno, node.col_offset))  # type: ignore[attr-defined]


def is_number(node: ast.expr) -> bool:
    """``x.item()``, ``x.detach()``, ``x.tolist()``, ``x.numpy()``, ``float(x)``, ``int(x)``, ``round(x)``."""
    if not isinstance(node, ast.Call):
        return False
    return is_method_call(node, *LEAVES_THE_GRAPH) or (isinstance(node.func, ast.Name) and node.func.id in TO_NUMBER)


def holds_graph(src: Source, node: ast.expr, numbers: set[str]) -> bool:
    """Whether an expression is a loss tensor with its graph: a name or attribute naming a loss (``loss``,
    ``self.aux_loss``) that is not in ``numbers``, a loss function's result (``criterion(out, y)``,
    ``loss_fn(...)``, ``F.cross_entropy(...)``), or arithmetic, an index or a tensor method (``loss.mean()``)
    on one. ``.item()``, ``.detach()``, ``.tolist()``, ``.numpy()``, ``float(...)`` and ``int(...)`` leave it."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return bool(LOSS.search(last_identifier(node))) and ast.unparse(node) not in numbers
    if isinstance(node, ast.BinOp):
        return holds_graph(src, node.left, numbers) or holds_graph(src, node.right, numbers)
    if isinstance(node, ast.UnaryOp):
        return holds_graph(src, node.operand, numbers)
    if isinstance(node, ast.Subscript):
        return holds_graph(src, node.value, numbers)
    if not isinstance(node, ast.Call):
        return False
    if is_number(node):
        return False
    name = src.name(node.func) or ""
    if name.startswith("torch.nn.functional."):
        return bool(FUNCTIONAL_LOSS.search(name.rpartition(".")[2]))
    if name.startswith("torch."):  # torch.mean(loss), torch.stack([...]).sum()
        return any(holds_graph(src, arg, numbers) for arg in node.args)
    if LOSS.search(last_identifier(node.func)):
        return True
    return isinstance(node.func, ast.Attribute) and holds_graph(src, node.func.value, numbers)


def accumulation(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """(total, added) of ``total += added`` or ``total = total + added`` (either order)."""
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
        return node.target, node.value
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.BinOp):
        target, value = node.targets[0], node.value
        if isinstance(value.op, ast.Add):
            spelled = ast.unparse(target)
            if ast.unparse(value.left) == spelled:
                return target, value.right
            if ast.unparse(value.right) == spelled:
                return target, value.left
    return None


def numbers_in(scope: Scope) -> set[str]:
    """Names this function only ever assigns from a number: ``loss = criterion(...).item()``."""
    kinds: dict[str, set[bool]] = {}
    for target, value in assignments([visit.node for visit in scope.visits]):
        kinds.setdefault(ast.unparse(target), set()).add(is_number(value))
    return {name for name, kind in kinds.items() if kind == {True}}


def loss_summed_with_graph(src: Source) -> Iterator[ast.AST]:
    """``total += loss`` or ``total = total + loss`` in a loop, outside ``no_grad``: each step's graph stays alive
    in ``total`` until the loop ends (memory grows every step; ``.item()`` or ``.detach()`` ends it).

    Left alone: a total the loop assigns afresh each step (``loss = criterion(...)``, then ``loss += aux``), a
    total the function calls ``.backward()`` on (summed on purpose), and what ``holds_graph`` does not see as a
    loss tensor.
    """
    for scope in src.scopes:
        numbers = numbers_in(scope)
        backed = {ast.unparse(node.func.value) for node, _, _ in scope.visits if is_method_call(node, "backward")}
        for node, no_grad, loop in scope.visits:
            summed = accumulation(node)
            if summed is None or loop is None or no_grad:
                continue
            total, added = summed
            spelled = ast.unparse(total)
            if spelled in backed or not holds_graph(src, added, numbers):
                continue
            afresh = any(
                ast.unparse(target) == spelled and accumulation(assign) is None
                for assign in ast.walk(loop)
                if isinstance(assign, (ast.Assign, ast.AnnAssign))
                for target in (assign.targets if isinstance(assign, ast.Assign) else [assign.target])
            )
            if not afresh:
                yield node

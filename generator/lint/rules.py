"""The anti-patterns at the end of PRACTICES.md, one small ``ast`` check each.

Every rule is a generator over a parsed file that yields the nodes it objects
to (or a ``Hit``: a node with a message naming what that line lacks);
``catalog.RULES`` gives each its code and a message citing the practice. The
checks read syntax only, so each one is a heuristic whose limits its docstring
states: they aim to stay silent on correct code (a false alarm teaches people
to ignore the linter) more than to catch every spelling of a mistake.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple, TypeGuard
from weakref import WeakKeyDictionary

from .names import import_aliases, qualified

LEGACY_CONSTRUCTORS = frozenset(
    f"{module}.{kind}Tensor"
    for module in ("torch", "torch.cuda")
    for kind in ("", "Float", "Double", "Half", "BFloat16", "Byte", "Char", "Short", "Int", "Long", "Bool")
)
TENSOR_FACTORIES = LEGACY_CONSTRUCTORS | {
    f"torch.{name}"
    for name in (
        "tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty", "full", "rand", "randn", "randint",
        "randperm", "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like",
        "full_like", "rand_like", "randn_like", "stack", "cat",
    )
}  # fmt: skip
NO_GRAD_CONTEXTS = frozenset(
    {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.inference_mode"}
)
NOT_MODULES = frozenset({"torch.nn.Parameter", "torch.nn.Buffer", "torch.nn.UninitializedParameter"})
# ``.data`` on these is a config section, parsed arguments or a data set's own attribute, not a tensor's.
NOT_TENSOR_SUBSTRINGS = ("cfg", "config", "dataset")
NOT_TENSOR_NAMES = frozenset({"self", "args", "opt", "opts", "options", "hparams"})
# ``trainset.data``, ``train_set.data``, ``ds.data``: a data set's array (torchvision's MNIST, CIFAR10).
DATA_SET_NAME = re.compile(r"(^|_|train|val|valid|test|sub)(set|ds)$", re.IGNORECASE)
# Methods of a tensor that return a Python value or a size, not a tensor.
NOT_TENSOR_METHODS = frozenset(
    {"item", "tolist", "numpy", "size", "dim", "numel", "nelement", "element_size", "stride", "data_ptr",
     "is_contiguous", "is_floating_point", "get_device", "storage_offset"}
)  # fmt: skip
MODULE_NAME = re.compile(r"(model|module|net|network|encoder|decoder|backbone|classifier)$", re.IGNORECASE)
LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


class Switch(NamedTuple):
    where: tuple[int, int]  # (line, column), comparable with a call's
    model: str  # as written: ``model``, ``self.net``
    is_eval: bool


class Visit(NamedTuple):
    node: ast.AST
    no_grad: bool  # inside ``with torch.no_grad()`` or a function decorated with it
    loop: ast.AST | None  # the innermost loop around the node


class Hit(NamedTuple):
    """A finding whose message says more than the rule's: what exactly is missing on that line."""

    node: ast.AST
    message: str


class Finding(NamedTuple):
    line: int
    col: int  # 0-based, as flake8 expects
    message: str  # starts with the code, as flake8 expects

    @property
    def code(self) -> str:
        return self.message.split(maxsplit=1)[0]


PARSED: WeakKeyDictionary[ast.Module, Source] = WeakKeyDictionary()  # dropped with the tree it was made from


class Scope(NamedTuple):
    node: ast.AST  # the module or a function
    visits: list[Visit]
    switches: list[Switch]  # in source order


@dataclass
class Source:
    """A parsed file with what every rule needs: import aliases and the nn.Module subclasses it defines."""

    tree: ast.Module
    aliases: dict[str, str] = field(init=False)
    module_classes: set[str] = field(init=False)
    nodes: list[ast.AST] = field(init=False)  # every node, walked once: each rule reads this list
    children: dict[int, list[ast.AST]] = field(init=False)  # id(node) -> its child nodes, from that one walk

    def __post_init__(self) -> None:
        # ast.walk's order (breadth first), keeping each node's children: walk_scope reads them again per function,
        # and asking ast for them a second time was a fifth of the check's time.
        self.nodes, self.children = [self.tree], {}
        for node in self.nodes:  # the list grows as it is read
            below = self.children[id(node)] = list(ast.iter_child_nodes(node))
            self.nodes.extend(below)
        self.aliases = import_aliases(self.nodes)
        self.module_classes = set()
        for node in self.nodes:  # source order for top-level classes: a base precedes its subclasses
            if isinstance(node, ast.ClassDef) and any(self.is_module_class_name(base) for base in node.bases):
                self.module_classes.add(node.name)

    @classmethod
    def of(cls, tree: ast.Module) -> Source:
        """The one Source of a parsed file: flake8 hands the same tree to our rules and to torchfix's gate."""
        source = PARSED.get(tree)
        if source is None:
            source = PARSED[tree] = cls(tree)
        return source

    def name(self, node: ast.expr) -> str | None:
        return qualified(node, self.aliases)

    def is_module_class_name(self, node: ast.expr) -> bool:
        """``nn.Module``, any ``nn.X`` layer, a module class of this file, or a ``...Module`` (LightningModule)."""
        name = self.name(node) or ""
        last = name.rpartition(".")[2]
        is_nn_class = name.startswith("torch.nn.") and name.count(".") == 2 and last[:1].isupper()
        return (is_nn_class and name not in NOT_MODULES) or name in self.module_classes or last.endswith("Module")

    def is_module_call(self, node: ast.expr) -> bool:
        """A call that builds a module: ``nn.Linear(...)``, a torchvision model, a module class of this file."""
        if not isinstance(node, ast.Call):
            return False
        name = self.name(node.func) or ""
        return self.is_module_class_name(node.func) or name.startswith("torchvision.models.")

    def calls(self) -> list[tuple[ast.Call, str]]:
        """Every call of a dotted name, with that name as imported (``th.load(...)`` -> ``torch.load``)."""
        return self.named_calls

    @cached_property
    def named_calls(self) -> list[tuple[ast.Call, str]]:
        return [(node, name) for node in self.nodes if isinstance(node, ast.Call) and (name := self.name(node.func))]

    @cached_property
    def scopes(self) -> list[Scope]:
        """The module and each function, with their nodes in grad context and loop, and their mode switches."""
        functions = [node for node in self.nodes if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        found = []
        for scope in [self.tree, *functions]:
            decorated = any(is_no_grad(self, decorator) for decorator in getattr(scope, "decorator_list", []))
            visits = list(walk_scope(self, scope, decorated, None))
            found.append(Scope(scope, visits, mode_switches(visits)))
        return found


def receiver(node: ast.expr) -> ast.expr:
    """The object a method chain starts from: ``model.to(device).float()`` -> ``model``."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return node


def is_method_call(node: ast.AST, *names: str) -> TypeGuard[ast.Call]:
    """``x.name(...)`` for one of ``names``."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names


def last_identifier(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def self_attribute(target: ast.expr) -> str | None:
    """``x`` for an assignment target ``self.x``."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return target.attr
    return None


def assignments(node: ast.AST | list[ast.AST]) -> Iterator[tuple[ast.expr, ast.expr]]:
    """(target, value) of every ``a = v`` and ``a: T = v`` under ``node`` (or among a list of walked nodes)."""
    for child in node if isinstance(node, list) else ast.walk(node):
        if isinstance(child, ast.Assign):
            for target in child.targets:
                yield target, child.value
        elif isinstance(child, ast.AnnAssign) and child.value is not None:
            yield child.target, child.value


def module_inits(src: Source) -> Iterator[tuple[ast.ClassDef, ast.FunctionDef]]:
    """Every nn.Module subclass in the file with its ``__init__``."""
    for node in src.nodes:
        if isinstance(node, ast.ClassDef) and node.name in src.module_classes:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    yield node, item


def dot_data(src: Source) -> Iterator[ast.AST]:
    """Any ``X.data``, unless X's name (or the name of the function that returned X) says it is a config,
    arguments, a data set (``dataset``, ``train_set``, ``ds``), ``self`` or ``torch.utils``, or X is a
    ``torchvision.datasets`` object this file built.
    """
    data_sets = {
        target.id
        for target, value in assignments(src.nodes)
        if isinstance(target, ast.Name) and is_data_set_call(src, value)
    }
    for node in src.nodes:
        if isinstance(node, ast.Attribute) and node.attr == "data":
            made_by = node.value.func if isinstance(node.value, ast.Call) else node.value  # load_config(...).data
            owner = last_identifier(made_by).lower()
            exempt = owner in NOT_TENSOR_NAMES or any(part in owner for part in NOT_TENSOR_SUBSTRINGS)
            exempt = exempt or bool(DATA_SET_NAME.search(owner)) or is_data_set_call(src, node.value)
            exempt = exempt or (isinstance(node.value, ast.Name) and node.value.id in data_sets)
            if not exempt and src.name(node.value) != "torch.utils":
                yield node


def is_data_set_call(src: Source, node: ast.expr) -> bool:
    """``torchvision.datasets.MNIST(...)`` and the like."""
    return isinstance(node, ast.Call) and (src.name(node.func) or "").startswith("torchvision.datasets.")


def legacy_constructor(src: Source) -> Iterator[ast.AST]:
    """Calls of ``torch.Tensor``, ``torch.FloatTensor``, ... (``torch.Tensor`` as a type is fine)."""
    for call, name in src.calls():
        if name in LEGACY_CONSTRUCTORS:
            yield call


def cuda_call(src: Source) -> Iterator[ast.AST]:
    """Any ``X.cuda(...)`` call; ``torch.cuda.*`` functions are not calls of a ``cuda`` method."""
    for node in src.nodes:
        if is_method_call(node, "cuda") and src.name(node.func.value) != "torch":  # type: ignore[attr-defined]
            yield node


def unsafe_load(src: Source) -> Iterator[Hit]:
    """``torch.load`` without ``map_location`` (keyword or 2nd argument) or without ``weights_only=True``;
    the message names only what the call lacks.

    A call with ``**kwargs`` is trusted, and so is ``weights_only=<an expression>``: what they pass cannot be
    read from the syntax, and the choice is written where a reviewer sees it. torchfix's TOR102 (no
    ``weights_only``) says less than this rule, so ``torch-scaffold check`` leaves it out.
    """
    for call, name in src.calls():
        if name != "torch.load" or any(keyword.arg is None for keyword in call.keywords):
            continue
        keywords = {keyword.arg: keyword.value for keyword in call.keywords}
        weights_only = keywords.get("weights_only")
        missing = []
        if "map_location" not in keywords and len(call.args) < 2:
            missing.append("map_location")
        if weights_only is None or (isinstance(weights_only, ast.Constant) and weights_only.value is not True):
            missing.append("weights_only=True")
        if missing:
            yield Hit(call, f"torch.load needs {' and '.join(missing)} (P7)")


def whole_module_save(src: Source) -> Iterator[ast.AST]:
    """``torch.save(X, ...)`` where X is a module by its name or by how this file built it.

    X counts as a module when it is a plain name or attribute whose last part
    ends in model, module, net, network, encoder, decoder, backbone or
    classifier (``model``, ``self.net``, ``model.module``, ``resnet``), or a
    name this file assigned from a module constructor (``m = nn.Linear(...)``).
    Anything else is taken to be a checkpoint: a dict literal, a variable such
    as ``state`` or ``checkpoint``, a call such as ``model.state_dict()``.
    """
    built = {
        target.id
        for target, value in assignments(src.nodes)
        if isinstance(target, ast.Name) and src.is_module_call(value)
    }
    for call, name in src.calls():
        if name != "torch.save" or not call.args:
            continue
        saved = call.args[0]
        by_name = isinstance(saved, (ast.Name, ast.Attribute)) and MODULE_NAME.search(last_identifier(saved))
        if by_name or (isinstance(saved, ast.Name) and saved.id in built):
            yield call


def holds_modules(src: Source, value: ast.expr) -> bool:
    """A list, tuple or dict literal (or comprehension, ``dict(...)``, ``[...] * n``) with a module in it."""
    if isinstance(value, (ast.List, ast.Tuple)):
        return any(map(src.is_module_call, value.elts))
    if isinstance(value, ast.Dict):
        return any(map(src.is_module_call, value.values))
    if isinstance(value, (ast.ListComp, ast.GeneratorExp)):
        return src.is_module_call(value.elt)
    if isinstance(value, ast.DictComp):
        return src.is_module_call(value.value)
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult):
        return holds_modules(src, value.left) or holds_modules(src, value.right)
    if isinstance(value, ast.Call) and src.name(value.func) in ("dict", "list", "tuple"):
        keywords = [keyword.value for keyword in value.keywords]
        return any(holds_modules(src, arg) or src.is_module_call(arg) for arg in [*value.args, *keywords])
    return False


def is_plain_container(src: Source, value: ast.expr) -> bool:
    """``[]``, ``{}``, ``list()``, ``dict()``: a container that may be filled with modules later."""
    if isinstance(value, (ast.List, ast.Dict)):
        return True
    return isinstance(value, ast.Call) and src.name(value.func) in ("list", "dict")


def module_list(src: Source) -> Iterator[ast.AST]:
    """In an nn.Module's ``__init__``: ``self.x = [module, ...]`` or ``{"a": module}`` (literal, comprehension,
    ``dict(a=module)``, ``[module] * n``), or a ``self.x`` assigned a plain list or dict there and then filled
    with modules: ``self.x.append(module)``, ``.extend([...])``, ``.insert(i, module)``, ``.update({...})``,
    ``.setdefault(k, module)``, ``self.x[k] = module``.
    """
    for _, init in module_inits(src):
        plain = set()
        for target, value in assignments(init):
            attribute = self_attribute(target)
            if attribute is not None and holds_modules(src, value):
                yield value
            elif attribute is not None and is_plain_container(src, value):
                plain.add(attribute)
        for target, value in assignments(init):
            in_plain = isinstance(target, ast.Subscript) and self_attribute(target.value) in plain
            if in_plain and src.is_module_call(value):
                yield target
        for node in ast.walk(init):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                continue
            if self_attribute(node.func.value) not in plain:
                continue
            if node.func.attr in ("append", "extend", "insert", "update", "setdefault"):
                added = node.args[-1]
                if src.is_module_call(added) or holds_modules(src, added):
                    yield node


def buffer_name(node: ast.AST) -> str | None:
    """``"mean"`` for ``self.register_buffer("mean", ...)``."""
    if is_method_call(node, "register_buffer") and node.args and isinstance(node.args[0], ast.Constant):
        return str(node.args[0].value)
    return None


def is_torch_layer(name: str | None) -> bool:
    """``torch.nn.BatchNorm2d`` and the like: torch's own layers, not the bare ``nn.Module``."""
    return name is not None and name.startswith("torch.nn.") and name != "torch.nn.Module"


def makes_tensor(src: Source, node: ast.expr, tensors: set[str]) -> bool:
    """Whether an expression builds a tensor: a factory (``torch.ones``, however imported), arithmetic with one
    (``torch.ones(1) * 2``), a method chain on one (``torch.arange(3).float().view(1, -1)``, but not ``.item()``
    or ``.tolist()``), a ``torch`` function of one (``torch.exp(...)``), an index into one, or a local name
    ``tensors`` holds. ``nn.Parameter(...)`` and other calls of classes are not.
    """
    if isinstance(node, ast.Name):
        return node.id in tensors
    if isinstance(node, ast.BinOp):
        return makes_tensor(src, node.left, tensors) or makes_tensor(src, node.right, tensors)
    if isinstance(node, ast.UnaryOp):
        return makes_tensor(src, node.operand, tensors)
    if isinstance(node, ast.IfExp):
        return makes_tensor(src, node.body, tensors) or makes_tensor(src, node.orelse, tensors)
    if isinstance(node, ast.Subscript):
        return makes_tensor(src, node.value, tensors)
    if not isinstance(node, ast.Call):
        return False
    name = src.name(node.func) or ""
    if name in TENSOR_FACTORIES:
        return True
    leaf = name.rpartition(".")[2]
    if name.startswith("torch.") and name.count(".") == 1 and leaf[:1].islower():
        return any(makes_tensor(src, arg, tensors) for arg in node.args)
    if isinstance(node.func, ast.Attribute) and not name.startswith("torch."):
        return node.func.attr not in NOT_TENSOR_METHODS and makes_tensor(src, node.func.value, tensors)
    return False


def unregistered_tensor(src: Source) -> Iterator[ast.AST]:
    """In an nn.Module's ``__init__``: ``self.x = <an expression that builds a tensor>`` (``makes_tensor``),
    directly or through a local name. Such an assignment only updates a buffer already registered, so names
    passed to ``register_buffer`` anywhere in the file are skipped, and so are subclasses of torch's own layers
    (``nn.BatchNorm2d`` registers buffers this file does not show).
    """
    buffers = {name for call in src.nodes if (name := buffer_name(call))}
    for cls, init in module_inits(src):
        if any(is_torch_layer(src.name(base)) for base in cls.bases):
            continue
        tensors: set[str] = set()
        for _ in range(3):  # locals built from locals: a few rounds reach a fixed point in real code
            tensors |= {
                target.id
                for target, value in assignments(init)
                if isinstance(target, ast.Name) and makes_tensor(src, value, tensors)
            }
        for target, value in assignments(init):
            attribute = self_attribute(target)
            if attribute and attribute not in buffers and makes_tensor(src, value, tensors):
                yield target


def is_no_grad(src: Source, node: ast.expr) -> bool:
    """``torch.no_grad()``, ``torch.inference_mode()``, bare as decorators, or ``torch.set_grad_enabled(False)``."""
    if isinstance(node, ast.Call):
        if src.name(node.func) == "torch.set_grad_enabled":
            return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value is False
        node = node.func
    return src.name(node) in NO_GRAD_CONTEXTS


def walk_scope(src: Source, node: ast.AST, no_grad: bool, loop: ast.AST | None) -> Iterator[Visit]:
    """Each node of one function (not of functions nested in it) with its grad context and innermost loop.

    An explicit stack rather than recursion: nested generators cost more than the rules themselves."""
    children = src.children
    stack = [(child, no_grad, loop) for child in reversed(children[id(node)])]
    while stack:
        child, grad_off, inside = stack.pop()
        if isinstance(child, SCOPES):
            continue
        yield Visit(child, grad_off, inside)
        inner = grad_off
        if isinstance(child, (ast.With, ast.AsyncWith)):
            inner = grad_off or any(is_no_grad(src, item.context_expr) for item in child.items)
        below = child if isinstance(child, LOOPS) else inside
        stack.extend((grandchild, inner, below) for grandchild in reversed(children[id(child)]))


def mode_switches(visits: list[Visit]) -> list[Switch]:
    """Each ``m.eval()``, ``m.train()``, ``m.train(False)``, ``m.train(mode=False)`` (a mode that is not a
    constant counts as training), and ``m = expr.eval()``, which makes ``m`` an evaluating model from there on."""
    switches = []
    for visit in visits:
        node = visit.node
        if is_method_call(node, "eval", "train"):
            mode = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "mode"), None)
            off = isinstance(mode, ast.Constant) and mode.value is False
            model = ast.unparse(receiver(node.func.value))
            switches.append(Switch((node.lineno, node.col_offset), model, node.func.attr == "eval" or off))
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and is_method_call(node.value, "eval"):
            switches.append(Switch((node.lineno, node.col_offset), ast.unparse(node.targets[0]), True))
    return sorted(switches)


def eval_loop(src: Source) -> Iterator[ast.AST]:
    """A loop that calls a model whose last ``.eval()``/``.train()`` before the call, in the same function,
    was ``.eval()``, outside any ``with torch.no_grad()``/``inference_mode()`` and without such a decorator.

    The model is matched by spelling: ``model.eval()`` then ``model(x)``; ``self.model.to(d).eval()`` then
    ``self.model(x)``; ``net = build().eval()`` then ``net(x)``. Reported once, at the innermost loop.
    """
    for scope in src.scopes:
        reported: set[int] = set()
        for node, no_grad, loop in scope.visits:
            if no_grad or loop is None or id(loop) in reported or not isinstance(node, ast.Call):
                continue
            model, position = ast.unparse(node.func), (node.lineno, node.col_offset)
            before = [switch.is_eval for switch in scope.switches if switch.model == model and switch.where < position]
            if before and before[-1]:
                reported.add(id(loop))
                yield loop

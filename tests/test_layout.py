"""The package's shape: no import cycles between its modules, commands apart from the library, the model below
training and evaluation, imports inside functions only for optional dependencies (and the library, in commands),
and command modules that import no modeling code."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src" / "depthattn"
# what a function may import lazily: optional extras, and the parts of torch and transformers that need one
OPTIONAL = ("vllm", "matplotlib", "lm_eval", "datasets", "pyarrow", "wandb", "huggingface_hub", "submitit", "scipy",
            "triton", "fla", "liger_kernel", "starlette", "uvicorn", "transformers.cli", "torch.utils.tensorboard",
            "torch.utils.cpp_extension", "torch.utils")
# a command imports the library when it runs, so --help stays fast
COMMANDS_IMPORT_LAZILY = ("depthattn", "torch", "transformers")
# depthattn modules that a library function imports, and why
LAZY_LIBRARY_IMPORTS = {
    ("depthattn", "depthattn.modeling"): "registers the models with the Auto classes at the first config; it imports "
                                         "the config",
    **dict.fromkeys([("depthattn.serving.transformers_serve", "depthattn.serving.engine_loader"),
                     ("depthattn.serving.transformers_serve", "depthattn.serving.engine_loader.MethodFieldsLoader")],
                    "subclasses the ModelLoader of transformers' server (the serve extra; 5.25 on)"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, top_level: bool) -> list[str]:
    """depthattn modules (and, for function-level imports, any module) that `path` imports."""
    tree = ast.parse(path.read_text())
    module, is_package = module_name(path), path.name == "__init__.py"
    nodes = tree.body if top_level else [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,
                                                                                       ast.AsyncFunctionDef))]
    found = []
    for node in nodes if top_level else [inner for fn in nodes for inner in ast.walk(fn)]:
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module, is_package, node)
            found += [f"{target}.{alias.name}" for alias in node.names] + [target]
    return found


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def graph() -> dict[str, set[str]]:
    edges = {}
    for name, path in MODULES.items():
        edges[name] = {target for target in imports(path, top_level=True) if target in MODULES and target != name}
    return edges


def test_no_import_cycles():
    edges, state, cycles = graph(), {}, []

    def visit(node, stack):
        state[node] = "open"
        for target in sorted(edges[node]):
            if state.get(target) == "open":
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    # the package's __init__ imports its submodules, which import it back for its name only: not a cycle of code
    cycles = [c for c in cycles if "depthattn" not in c]
    assert not cycles, cycles


def imports_torch(module: str) -> bool:
    """Whether depthattn's `module` imports torch itself, at its top or in a function."""
    path = MODULES[module]
    return any(name.split(".")[0] == "torch" for name in imports(path, top_level=True) + imports(path, top_level=False))


def test_the_config_reaches_only_the_methods_descriptions():
    """config.py reads the methods' descriptions, which import no torch: nothing it imports, at its top or in a
    function, imports torch (a method's module, the model) or leads back to the config (config, methods and modeling
    were one import circle)."""
    edges = {name: {target for target in imports(path, top_level=True) + imports(path, top_level=False)
                    if target in MODULES and target != name} for name, path in MODULES.items()}
    reached, todo = set(), ["depthattn.config"]
    while todo:
        new = edges[todo.pop()] - reached
        reached |= new
        todo += new
    assert "depthattn.config" not in reached, "an import cycle runs through depthattn.config"
    assert not {module for module in reached if imports_torch(module)}


def test_reading_the_methods_fields_and_presets_imports_no_method_module():
    """In a fresh process, the config, every method's fields and the presets load none of depthattn's modules that
    import torch (`depthattn --help`, `depthattn convert --help` read them)."""
    code = """
import sys
from depthattn.config import method_fields
from depthattn.presets import METHOD_PRESETS, method_settings

assert method_fields() and [method_settings(name, 4) for name in METHOD_PRESETS]
print(" ".join(sorted(name for name in sys.modules if name.startswith("depthattn"))))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert not [module for module in loaded if imports_torch(module)]
    assert "depthattn.methods.descriptions.depth_attention" in loaded


@pytest.mark.parametrize("layer, forbidden", [
    ("depthattn.modeling", ("depthattn.train", "depthattn.evaluate", "depthattn.study", "depthattn.commands")),
    ("depthattn.methods", ("depthattn.modeling", "depthattn.train", "depthattn.evaluate", "depthattn.study",
                           "depthattn.commands")),
    ("depthattn.ops", ("depthattn.modeling", "depthattn.methods", "depthattn.train", "depthattn.commands")),
    ("depthattn.train", ("depthattn.evaluate", "depthattn.study", "depthattn.commands")),
    ("depthattn.evaluate", ("depthattn.study", "depthattn.commands")),
    ("depthattn.study", ("depthattn.commands",)),
    ("depthattn.loading", ("depthattn.train", "depthattn.evaluate", "depthattn.study", "depthattn.serving",
                           "depthattn.commands")),  # evaluation and serving open folders without the trainer
    ("depthattn.serving", ("depthattn.train", "depthattn.evaluate", "depthattn.study", "depthattn.commands")),
])
def test_data_flows_one_way(layer, forbidden):
    edges = graph()
    wrong = {(name, target) for name, targets in edges.items() if name == layer or name.startswith(f"{layer}.")
             for target in targets if target.startswith(forbidden)}
    assert not wrong


def test_nothing_outside_the_commands_imports_a_command():
    edges = graph()
    wrong = {(name, target) for name, targets in edges.items() if not name.startswith("depthattn.commands")
             and name != "depthattn.cli" for target in targets if target.startswith("depthattn.commands")}
    assert not wrong


def test_imports_inside_functions_are_of_optional_dependencies_only():
    lazy = {(name, target) for name, path in MODULES.items() for target in imports(path, top_level=False)
            if not target.startswith(OPTIONAL) and target.split(".")[0] != "sys"
            and target != "depthattn"}  # `from . import x`: x is checked
    lazy = {(name, target) for name, target in lazy if not (target.startswith("depthattn.ops.depth_mix._triton")
                                                            or target == "depthattn.ops.depth_mix")}
    lazy = {(name, target) for name, target in lazy if (name, target) not in LAZY_LIBRARY_IMPORTS
            and not (name.startswith("depthattn.commands.") and target.split(".")[0] in COMMANDS_IMPORT_LAZILY)}
    assert not lazy


MODELING = ("transformers.modeling_utils", "depthattn.modeling")
NOT_YET_LIGHT: dict[str, str] = {}


def test_commands_and_their_help_import_no_modeling_code():
    """Each command module imports the library in run(), so `depthattn COMMAND --help` stays fast: in one fresh
    process, each command's --help in turn, until one imports modeling code."""
    code = f"""
import contextlib, io, sys
from depthattn.cli import COMMANDS, main
for name, (module, _) in COMMANDS.items():
    if f"depthattn.commands.{{module}}" in {sorted(NOT_YET_LIGHT)!r}:
        continue
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main([name, "--help"])
    if loaded := [m for m in {MODELING!r} if m in sys.modules]:
        print(name, loaded)
        break
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "", f"the first command whose --help imports modeling code: {done.stdout}"


# Where a method's name may appear outside methods/, and why: the model's own identity and defaults, the reference
# checkpoints' own names, and the demo, which trains Depth-Attention against vanilla.
NAMES_METHODS = {
    "depthattn.config": "the model type and cross_layer's default; the old name of vanilla",
    "depthattn.convert": "the reference implementation's checkpoints name their method",
    "depthattn.commands.demo": "the demo trains Depth-Attention against vanilla",
}


def docstring_ids(tree: ast.AST) -> set[int]:
    """The ids of the docstrings' Constant nodes in `tree`."""
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and ast.get_docstring(node, clean=False) is not None}


def test_no_module_outside_methods_names_a_method():
    """A method registered from outside is served, costed, studied and reported with no other file touched, so no
    other module names one (string constants, docstrings aside)."""
    from depthattn.methods import METHODS
    from depthattn.presets import METHOD_PRESETS

    names, found = set(METHODS) | set(METHOD_PRESETS), set()
    for module, path in MODULES.items():
        if module.startswith("depthattn.methods") or module in NAMES_METHODS:
            continue
        tree = ast.parse(path.read_text())
        docstrings = docstring_ids(tree)
        found |= {(module, node.lineno, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant)
                  and node.value in names and id(node) not in docstrings}
    assert not found, f"method names outside methods/ (move the knowledge into the method's class): {found}"


# Where a method's config field may be named outside methods/, and why
NAMES_METHOD_FIELDS = {
    "depthattn": "exports the function depth_mix of depthattn.ops, which has the name of Depth-Attention's field",
    "depthattn.ops.depth_mix": "Depth-Attention's mixing kernels: their function depth_mix has the field's name",
    "depthattn.convert": "the reference implementation's checkpoints set Depth-Attention's fields",
}


def test_no_module_outside_methods_names_a_method_field():
    """A method's fields are set through the config and switched through `switch_method_field` and
    `--method-field NAME=VALUE`, so no other module names one: as a string constant (docstrings aside), a keyword
    argument or a parameter."""
    from depthattn.methods import METHODS

    fields, found = {name for method in METHODS.values() for name in method.config_fields}, set()
    for module, path in MODULES.items():
        if module.startswith("depthattn.methods") or module in NAMES_METHOD_FIELDS:
            continue
        tree = ast.parse(path.read_text())
        docstrings = docstring_ids(tree)
        for node in ast.walk(tree):
            name = (node.value if isinstance(node, ast.Constant) and id(node) not in docstrings else
                    node.arg if isinstance(node, (ast.keyword, ast.arg)) else None)
            if name in fields:
                found.add((module, node.lineno, name))
    assert not found, f"method fields named outside methods/ (move the knowledge into the method's class): {found}"


# The tests of what every method must do take their cases from the registry (tests/helpers.py's `method_cases`: each
# method at its defaults and the variants it declares), and the benchmarks their candidates (a kernel: a method's
# switchable field), so none of them names a method (but vanilla, the reference every method is compared with), a
# preset or a method's field
ROOT = Path(__file__).parents[1]
EVERY_METHOD_TESTS = ("tests/methods/test_conformance.py", "tests/model/test_continuous_batching.py",
                      "tests/model/test_gradient_checkpointing.py", "tests/model/test_tensor_parallel.py",
                      "tests/model/tensor_parallel_worker.py", "tests/vllm/test_vllm.py",
                      *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "benchmarks").glob("*.py")))


@pytest.mark.parametrize("path", EVERY_METHOD_TESTS)
def test_the_tests_of_every_method_and_the_benchmarks_name_none(path):
    from depthattn.methods import METHODS
    from depthattn.presets import METHOD_PRESETS

    names = (set(METHODS) | set(METHOD_PRESETS)) - {"vanilla"}
    fields = {name for method in METHODS.values() for name in method.config_fields}
    tree = ast.parse((ROOT / path).read_text())
    docstrings = docstring_ids(tree)
    found = set()
    for node in ast.walk(tree):
        name = (node.value if isinstance(node, ast.Constant) and id(node) not in docstrings else
                node.arg if isinstance(node, (ast.keyword, ast.arg)) else None)
        if name in names | fields:
            found.add((node.lineno, name))
    assert not found, f"{path} names methods or their fields (declare cases on the method instead): {found}"


def test_docs_layout_names_every_module():
    """docs/layout.md names every module of src/depthattn/ in the entry of its top folder (a top-level module anywhere
    in the package's block); commands/ holds one module per subcommand, named by it."""
    text = (ROOT / "docs" / "layout.md").read_text()
    package = text.split("src/depthattn/\n", 1)[1].split("\nconfigs/", 1)[0]
    entries = {entry.split(None, 1)[0]: entry for entry in re.split(r"\n  (?=\S)", "\n" + package) if entry.strip()}
    unnamed = []
    for path in sorted((ROOT / "src" / "depthattn").rglob("*.py")):
        relative = path.relative_to(ROOT / "src" / "depthattn")
        if path.stem in ("__init__", "__main__") or relative.parts[0] == "commands":
            continue
        where = package if len(relative.parts) == 1 else entries.get(relative.parts[0] + "/", "")
        if not re.search(rf"(?<![\w.]){re.escape(path.stem)}\b", where):
            unnamed.append(str(relative))
    assert not unnamed, f"docs/layout.md does not name these modules in their folder's entry: {unnamed}"

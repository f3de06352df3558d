"""Spark SQL column expressions evaluated with ``pyarrow.compute`` inside our own tasks.

``add_columns`` with SQL expressions would otherwise run scan -> Spark ``selectExpr`` ->
writer, moving every value Python -> JVM -> Python. For the common expressions (arithmetic,
comparisons, boolean logic, null handling, a few string functions over plain columns) the
driver lets Spark parse, resolve and type-check the expression, then translates Spark's
*analyzed* Catalyst tree (``Expression.toJSON``: nodes in pre-order, implicit casts already
inserted) into a small picklable tree that executors evaluate on Arrow batches, in the same
task that scans and writes. Anything outside the whitelist below - an unknown node, a
narrowing or string cast, decimals, timestamps, nondeterministic functions, ``try_*`` - raises
``Untranslatable`` and ``add_columns`` keeps Spark's own evaluation.

Spark semantics kept (Spark 4, ``spark.sql.ansi.enabled`` read when the tree is analysed):

* integral ``+ - * unary-`` and ``abs``: overflow is an error under ANSI (checked kernels),
  wraps otherwise (Arrow's unchecked kernels wrap in two's complement, as the JVM does);
* ``/`` is only ever double / double after analysis; ``/`` and ``%`` by zero are an error
  under ANSI and null otherwise; ``%`` takes the dividend's sign (C ``fmod`` = Java ``%``);
* float comparisons order NaN above every number and NaN = NaN (Spark's ``SQLOrderingUtil``);
* ``AND`` / ``OR`` are three-valued (Kleene); ``IF`` treats a null condition as false;
* results carry exactly the Spark type of the node; the caller casts to the stored type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.runtime.session import is_classic

__all__ = ["SqlColumns", "Untranslatable", "compile_frame", "compile_projection", "evaluate"]

_PKG = "org.apache.spark.sql.catalyst.expressions."
_ARROW = {"byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(),
          "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(), "string": pa.string()}
_INTEGRAL = ("byte", "short", "integer", "long")
_FLOATING = ("float", "double")
_RANK = {"byte": 0, "short": 1, "integer": 2, "long": 3, "float": 4, "double": 5}
_ARITH = {"Add": "add", "Subtract": "subtract", "Multiply": "multiply"}
_COMPARE = ("EqualTo", "LessThan", "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual")


class Untranslatable(Exception):
    """The expression needs Spark's own evaluation (internal signal, never user-facing)."""


@dataclass(frozen=True)
class Node:
    """One operation of a translated expression; ``type`` is its Spark type name."""

    op: str
    type: str
    args: tuple[Node, ...] = ()
    value: Any = None  # literal value, column name, or a flag (checked / ansi)


# -- translation on the driver ------------------------------------------------------------------
def _tree(nodes: list[dict[str, Any]], i: int = 0) -> tuple[dict[str, Any], int]:
    """Rebuild the pre-order ``toJSON`` list into nested dicts (children under ``_kids``)."""
    node = dict(nodes[i])
    i += 1
    kids = []
    for _ in range(int(node.get("num-children", 0))):
        kid, i = _tree(nodes, i)
        kids.append(kid)
    node["_kids"] = kids
    return node, i


def _literal(raw: Any, spark_type: str) -> Any:
    if raw is None:
        return None
    if spark_type in _INTEGRAL:
        return int(raw)
    if spark_type in _FLOATING:
        return float(raw)
    if spark_type == "boolean":
        return str(raw).lower() == "true"
    if spark_type == "string":
        return str(raw)
    if spark_type.startswith("decimal("):
        return Decimal(str(raw))
    raise Untranslatable(f"literal of type {spark_type}")


class _Translator:
    def __init__(self, columns: dict[str, str], ansi: bool) -> None:
        self.columns = columns  # column name -> the Spark type its Lance type reads as
        self.ansi = ansi

    def node(self, d: dict[str, Any]) -> Node:
        cls = str(d.get("class", ""))
        if not cls.startswith(_PKG):
            raise Untranslatable(cls)
        name = cls[len(_PKG):]
        kids = d["_kids"]
        handler = getattr(self, f"_{name}", None)
        if handler is not None:
            return handler(d, kids)
        if name in _ARITH:
            return self._arith(_ARITH[name], kids)
        if name in _COMPARE:
            a, b = self._same_type(kids)
            return Node(name, "boolean", (a, b))
        raise Untranslatable(name)

    def _same_type(self, kids: list[dict[str, Any]]) -> tuple[Node, Node]:
        a, b = (self.node(k) for k in kids)
        if a.type != b.type or a.type not in _ARROW:
            raise Untranslatable(f"operands {a.type} / {b.type}")
        return a, b

    def _arith(self, fn: str, kids: list[dict[str, Any]]) -> Node:
        a, b = self._same_type(kids)
        if a.type not in _RANK:
            raise Untranslatable(f"arithmetic on {a.type}")
        return Node("arith", a.type, (a, b), (fn, self.ansi and a.type in _INTEGRAL))

    def _AttributeReference(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        name, st = d["name"], d["dataType"]
        if self.columns.get(name) != st or st not in _ARROW:
            raise Untranslatable(f"column {name} of type {st}")
        return Node("column", st, (), name)

    def _Literal(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        st = d["dataType"]
        if st == "void":  # NULL: usable once a cast gives it a type
            return Node("literal", st, (), None)
        value = _literal(d.get("value"), st)
        if isinstance(value, Decimal):
            return Node("decimal", st, (), value)  # only usable folded into a cast
        if st not in _ARROW:
            raise Untranslatable(f"literal of type {st}")
        return Node("literal", st, (), value)

    def _Cast(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        to = d["dataType"]
        child = self.node(kids[0])
        if child.op in ("literal", "decimal") and to in _RANK and child.value is not None:
            if child.type in _RANK or child.op == "decimal":
                v = child.value
                if to in _INTEGRAL:
                    if child.type not in _INTEGRAL or not _fits(int(v), to):
                        raise Untranslatable(f"literal cast {child.type} -> {to}")
                    return Node("literal", to, (), int(v))
                return Node("literal", to, (), float(v))
        if child.op == "literal" and child.value is None and to in _ARROW:
            return Node("literal", to, (), None)
        if child.type in _RANK and to in _RANK and _RANK[to] >= _RANK[child.type] and child.op != "decimal":
            # widening only: integral -> wider integral or floating (rounds to nearest, as the
            # JVM's i2d / l2d / l2f do), float -> double (exact)
            return Node("cast", to, (child,))
        raise Untranslatable(f"cast {child.type} -> {to}")

    def _Divide(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        a, b = self._same_type(kids)
        if a.type != "double":
            raise Untranslatable(f"divide on {a.type}")
        return Node("divide", "double", (a, b), self.ansi)

    def _Remainder(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        a, b = self._same_type(kids)
        if a.type not in _RANK:
            raise Untranslatable(f"remainder on {a.type}")
        return Node("remainder", a.type, (a, b), self.ansi)

    def _UnaryMinus(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        a = self.node(kids[0])
        if a.type not in _RANK:
            raise Untranslatable(f"negate {a.type}")
        return Node("negate", a.type, (a,), self.ansi and a.type in _INTEGRAL)

    def _UnaryPositive(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        return self.node(kids[0])

    def _Abs(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        a = self.node(kids[0])
        if a.type not in _RANK:
            raise Untranslatable(f"abs {a.type}")
        return Node("abs", a.type, (a,), bool(d.get("failOnError", self.ansi)) and a.type in _INTEGRAL)

    def _bool_args(self, kids: list[dict[str, Any]]) -> tuple[Node, ...]:
        args = tuple(self.node(k) for k in kids)
        if any(a.type != "boolean" for a in args):
            raise Untranslatable("non-boolean logic operand")
        return args

    def _And(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        return Node("and", "boolean", self._bool_args(kids))

    def _Or(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        return Node("or", "boolean", self._bool_args(kids))

    def _Not(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        return Node("not", "boolean", self._bool_args(kids))

    def _IsNull(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        return Node("is_null", "boolean", (self.node(kids[0]),))

    def _IsNotNull(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        return Node("is_valid", "boolean", (self.node(kids[0]),))

    def _Coalesce(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        args = tuple(self.node(k) for k in kids)
        if len({a.type for a in args}) != 1 or args[0].type not in _ARROW:
            raise Untranslatable("coalesce of mixed types")
        return Node("coalesce", args[0].type, args)

    def _If(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        cond, a, b = (self.node(k) for k in kids)
        if cond.type != "boolean" or a.type != b.type or a.type not in _ARROW:
            raise Untranslatable("if with mixed types")
        return Node("if", a.type, (cond, a, b))

    def _Length(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        a = self.node(kids[0])
        if a.type != "string":
            raise Untranslatable(f"length of {a.type}")
        return Node("length", "integer", (a,))

    def _Concat(self, d: dict[str, Any], kids: list[dict[str, Any]]) -> Node:
        args = tuple(self.node(k) for k in kids)
        if not args or any(a.type != "string" for a in args):
            raise Untranslatable("concat of non-strings")
        return Node("concat", "string", args)


def _fits(v: int, spark_type: str) -> bool:
    info = np.iinfo(_ARROW[spark_type].to_pandas_dtype())
    return int(info.min) <= v <= int(info.max)


def translate(alias_json: str, columns: dict[str, str], ansi: bool) -> tuple[str, Node]:
    """``(output name, tree)`` of one analysed ``expr AS name``; raises ``Untranslatable``."""
    root, _ = _tree(json.loads(alias_json))
    if not str(root.get("class", "")).endswith(".Alias"):
        raise Untranslatable("not an aliased expression")
    return str(root["name"]), _Translator(columns, ansi).node(root["_kids"][0])


@dataclass(frozen=True)
class SqlColumns:
    """A ``ColumnFunction``-compatible callable: the translated expressions on Arrow batches."""

    exprs: tuple[tuple[str, Node, str], ...]  # (name, tree, source text)
    output_schema: pa.Schema

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(self.arrays(batch), schema=self.output_schema)

    def arrays(self, batch: pa.RecordBatch, raw_errors: bool = False) -> list[pa.Array]:
        """One array per expression, typed as the output schema. An evaluation error (ANSI
        overflow, division by zero) is an ``InvalidInputError`` naming the column, or the raw
        ``pa.ArrowInvalid`` with ``raw_errors`` (for callers that retry on fewer rows)."""
        arrays = []
        for (name, node, text), f in zip(self.exprs, self.output_schema, strict=True):
            try:
                out = evaluate(node, batch)
            except pa.ArrowInvalid as e:
                if raw_errors:
                    raise
                raise InvalidInputError(f"column {name!r}: evaluating {text!r} failed: {e}") from e
            arrays.append(out if out.type == f.type else out.cast(f.type))
        return arrays


def compile_projection(aliases: list[str], texts: list[str], columns: dict[str, str], ansi: bool,
                       output_schema: pa.Schema) -> SqlColumns:
    """Translate every analysed alias of a projection; ``Untranslatable`` if any cannot be."""
    exprs = []
    for js, text in zip(aliases, texts, strict=True):
        name, node = translate(js, columns, ansi)
        if node.type not in _ARROW:
            raise Untranslatable(f"result of type {node.type}")
        exprs.append((name, node, text))
    if [n for n, _, _ in exprs] != output_schema.names:
        raise Untranslatable("projection names differ from the analysed schema")
    return SqlColumns(tuple(exprs), output_schema)


def compile_frame(spark: Any, projected: Any, texts: list[str], columns: dict[str, str],
                  output_schema: pa.Schema) -> SqlColumns | None:
    """Translate the analysed projection of the Spark DataFrame ``projected`` (one ``expr AS
    name`` per text), or None when Spark must evaluate it (or the JVM plan is not reachable,
    as under Spark Connect). ``columns``: name -> Spark type of the columns we can feed."""
    if not is_classic(spark):
        return None
    try:
        ansi = str(spark.conf.get("spark.sql.ansi.enabled", "true")).lower() == "true"
        it = projected._jdf.queryExecution().analyzed().expressions().iterator()  # noqa: SLF001 - py4j
        aliases = []
        while it.hasNext():
            aliases.append(it.next().toJSON())
        return compile_projection(aliases, texts, columns, ansi, output_schema)
    except Untranslatable:
        return None
    except Exception:  # noqa: BLE001 - no JVM plan to read: Spark evaluates
        return None


# -- evaluation on executors --------------------------------------------------------------------
def _compare(op: str, a: Any, b: Any, spark_type: str) -> Any:
    base = {"EqualTo": pc.equal, "LessThan": pc.less, "LessThanOrEqual": pc.less_equal,
            "GreaterThan": pc.greater, "GreaterThanOrEqual": pc.greater_equal}[op](a, b)
    if spark_type not in _FLOATING:
        return base
    # NaN sorts above every number and equals itself (null-propagating and/or: a null operand
    # must stay null, never become true through the NaN correction)
    na, nb = pc.is_nan(a), pc.is_nan(b)
    both = pc.and_(na, nb)
    if op == "EqualTo":
        return pc.or_(base, both)
    a_high = pc.and_(na, pc.invert(nb))
    b_high = pc.and_(nb, pc.invert(na))
    if op in ("LessThan", "LessThanOrEqual"):
        out = pc.or_(base, b_high)
    else:
        out = pc.or_(base, a_high)
    return pc.or_(out, both) if op.endswith("OrEqual") else out


def _zero_divisor(a: Any, b: Any, ansi: bool, what: str) -> tuple[Any, Any]:
    """Spark: x / 0 and x % 0 fail under ANSI and are null otherwise. Returns (b', null mask)."""
    zero = pc.equal(b, pa.scalar(0, b.type))
    if not pc.any(zero).as_py():
        return b, None
    if ansi:
        raise pa.ArrowInvalid(f"[{what.upper()}_BY_ZERO] {what} by zero")
    return pc.if_else(zero, pa.scalar(1, b.type), b), zero


def _remainder(a: Any, b: Any, ansi: bool, spark_type: str) -> Any:
    b, zero = _zero_divisor(a, b, ansi, "remainder")
    if spark_type in _INTEGRAL:
        # x % -1 == 0 == x % 1, and it keeps INT_MIN % -1 (a hardware trap in C) away from fmod
        b = pc.if_else(pc.equal(b, pa.scalar(-1, b.type)), pa.scalar(1, b.type), b)
    n = len(a) if isinstance(a, pa.Array) else len(b) if isinstance(b, pa.Array) else 1
    valid = pc.and_(pc.is_valid(a), pc.is_valid(b))
    av = _dense(a, n, spark_type)
    bv = _dense(b, n, spark_type, fill=1)
    with np.errstate(invalid="ignore"):  # inf % x and x % 0.0 are NaN, as in Spark
        out = pa.array(np.fmod(av, bv), _ARROW[spark_type])
    mask = pc.invert(valid) if zero is None else pc.or_(pc.invert(valid), zero)
    out = pc.if_else(mask, pa.scalar(None, _ARROW[spark_type]), out)
    if isinstance(a, pa.Scalar) and isinstance(b, pa.Scalar):
        return out[0]  # both literal: a scalar, broadcast by evaluate() like other literals
    return out


def _dense(x: Any, n: int, spark_type: str, fill: int = 0) -> np.ndarray:
    if isinstance(x, pa.Scalar):
        v = x.as_py()
        return np.full(n, fill if v is None else v, dtype=_ARROW[spark_type].to_pandas_dtype())
    return pc.fill_null(x, pa.scalar(fill, x.type)).to_numpy(zero_copy_only=False)


def _eval(node: Node, batch: pa.RecordBatch) -> Any:
    op = node.op
    if op == "column":
        col = batch.column(batch.schema.get_field_index(node.value))
        return col if col.type == _ARROW[node.type] else col.cast(_ARROW[node.type])
    if op == "literal":
        return pa.scalar(node.value, _ARROW[node.type])
    args = [_eval(a, batch) for a in node.args]
    if op == "arith":
        fn, checked = node.value
        return getattr(pc, f"{fn}_checked" if checked else fn)(*args)
    if op in _COMPARE:
        return _compare(op, args[0], args[1], node.args[0].type)
    if op == "cast":
        return pc.cast(args[0], _ARROW[node.type], safe=node.args[0].type not in _INTEGRAL
                       or node.type in _INTEGRAL)
    if op == "divide":
        b, zero = _zero_divisor(args[0], args[1], node.value, "divide")
        out = pc.divide(args[0], b)
        return out if zero is None else pc.if_else(zero, pa.scalar(None, pa.float64()), out)
    if op == "remainder":
        return _remainder(args[0], args[1], node.value, node.type)
    if op == "negate":
        return (pc.negate_checked if node.value else pc.negate)(args[0])
    if op == "abs":
        return (pc.abs_checked if node.value else pc.abs)(args[0])
    if op == "and":
        return pc.and_kleene(*args)
    if op == "or":
        return pc.or_kleene(*args)
    if op == "not":
        return pc.invert(args[0])
    if op == "is_null":
        return pc.is_null(args[0])
    if op == "is_valid":
        return pc.is_valid(args[0])
    if op == "coalesce":
        return pc.coalesce(*args)
    if op == "if":
        return pc.if_else(pc.fill_null(args[0], False), args[1], args[2])
    if op == "length":
        return pc.utf8_length(args[0])
    if op == "concat":
        return pc.binary_join_element_wise(*args, "", null_handling="emit_null")
    raise AssertionError(f"unknown op {op}")  # pragma: no cover - translate() made the tree


def evaluate(node: Node, batch: pa.RecordBatch) -> pa.Array:
    """The values of ``node`` for every row of ``batch`` (a literal is broadcast)."""
    out = _eval(node, batch)
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    if isinstance(out, pa.Scalar):
        out = pa.repeat(out, batch.num_rows)
    return out

"""The writer's action format as pydantic models: one definition for the grammar and for validation.

``Add`` / ``Update`` / ``Noop`` are what the gate accepts from any backend (lenient
where other backends differ: ``type`` for ``op``, any case, ``msg`` optional).
``output_model`` narrows the same models for one window (owners from the roster,
message numbers, shown entry ids, no extra keys) and its ``model_json_schema()``
becomes the grammar the model decodes under, so the two cannot drift apart.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from ..records import GROUP, GROUP_LAYERS, PERSON_LAYERS, WRITER_LAYERS, WRITER_UTYPES

MAX_CONTENT_CHARS = 400   # one record holds one statement
GRAMMAR_CONTENT_CHARS = 200


class _Action(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    op: str = Field(validation_alias=AliasChoices("op", "type"))
    msg: int | None = None

    @field_validator("op", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.strip().upper() if isinstance(v, str) else v


class Noop(_Action):
    op: Literal["NOOP"] = Field(validation_alias=AliasChoices("op", "type"))


class Add(_Action):
    op: Literal["ADD"] = Field(validation_alias=AliasChoices("op", "type"))
    owner: str
    source: str
    # Literals of the runtime tuples: pydantic checks them (and the grammar lists them); mypy cannot read them.
    layer: Literal[WRITER_LAYERS]  # type: ignore[valid-type]
    utype: Literal[WRITER_UTYPES]  # type: ignore[valid-type]
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)

    @field_validator("content", mode="before")
    @classmethod
    def _flatten(cls, v: Any) -> Any:
        return " ".join(v.split()) if isinstance(v, str) else v


class Update(_Action):
    op: Literal["UPDATE"] = Field(validation_alias=AliasChoices("op", "type"))
    entry_id: str | int = ""   # resolved against the shown heads by the gate
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    # Add's validator, reused: its classmethod's function, which mypy does not model on a bound method.
    _flatten = field_validator("content", mode="before")(Add._flatten.__func__)  # type: ignore[attr-defined]


_OPS: dict[str, type[Add] | type[Update] | type[Noop]] = {"ADD": Add, "UPDATE": Update, "NOOP": Noop}


def validate_action(action: Any) -> tuple[Add | Update | Noop | None, str | None]:
    """The action as a model, or the reason it is not one (in words an operator can read)."""
    if not isinstance(action, dict):
        return None, "an action must be a JSON object"
    op = str(action.get("op", action.get("type", ""))).strip().upper()
    model = _OPS.get(op)
    if model is None:
        return None, f"unknown op {action.get('op')!r} (expected ADD, UPDATE or NOOP)"
    try:
        return model.model_validate(action), None
    except ValidationError as err:
        return None, _reason(err, action)


_ORDER = ("content", "layer", "utype", "owner", "source")  # the first problem an operator should read


def _reason(err: ValidationError, action: dict) -> str:
    errors = err.errors()
    rank = lambda e: _ORDER.index(str(e["loc"][0])) if e["loc"] and str(e["loc"][0]) in _ORDER else len(_ORDER)  # noqa: E731
    first = min(errors, key=rank)
    field = str(first["loc"][0]) if first["loc"] else "action"
    kind = first["type"]
    if field == "content":
        if kind in ("missing", "string_too_short", "string_type"):
            return "content is missing or empty"
        if kind == "string_too_long":
            n = len(" ".join(str(action.get("content", "")).split()))
            return f"content is {n} characters; one record holds one statement (<= {MAX_CONTENT_CHARS})"
    if field == "layer":
        return f"layer {action.get('layer')!r} is not one of {', '.join(WRITER_LAYERS)}"
    if field == "utype":
        return f"utype {action.get('utype')!r} is not one of {', '.join(WRITER_UTYPES)}"
    if kind == "missing":
        return f"{field} is missing"
    return f"{field}: {first['msg']}"


# ----------------------------------------------------------------------------- grammar for one window
def _lit(values: Sequence[Any]) -> Any:
    return Literal[tuple(values)]


def _strict(name: str, **fields: Any) -> type[BaseModel]:
    # Field order is the order the model writes them: where from, who, then the content last.
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)


def output_model(people: Sequence[str], entry_ids: Sequence[str], max_items: int, n_messages: int,
                 extractive: bool) -> type[BaseModel]:
    """The whole output for one window: ``{"actions": [...]}`` with owners, messages and ids narrowed."""
    persons = sorted(set(people))
    msg = (_lit(range(1, n_messages + 1)), ...)
    variants: list[type[BaseModel]] = []
    for owners, layers, tag in ((persons, PERSON_LAYERS, "Person"), ([GROUP], GROUP_LAYERS, "Group")):
        if not owners:
            continue
        if extractive:
            # The record quotes message N and its author is the source: the system fills both.
            variants.append(_strict(f"Quote{tag}", op=(Literal["ADD"], ...), msg=msg, owner=(_lit(owners), ...),
                                    layer=(_lit(layers), ...), utype=(_lit(WRITER_UTYPES), ...)))
        else:
            variants.append(_strict(f"Add{tag}", op=(Literal["ADD"], ...), msg=msg, owner=(_lit(owners), ...),
                                    source=(_lit(persons), ...), layer=(_lit(layers), ...),
                                    utype=(_lit(WRITER_UTYPES), ...),
                                    content=(str, Field(max_length=GRAMMAR_CONTENT_CHARS))))
    if entry_ids:
        fields: dict[str, Any] = {"op": (Literal["UPDATE"], ...), "msg": msg, "entry_id": (_lit(entry_ids), ...)}
        if not extractive:
            fields["content"] = (str, Field(max_length=GRAMMAR_CONTENT_CHARS))
        variants.append(_strict("Revise", **fields))
    # NOOP is not offered to the grammar: an empty list says "nothing new", and tiny models
    # otherwise fill the whole budget with NOOPs. The gate still accepts NOOP from other backends.
    item: Any = variants[0] if len(variants) == 1 else _union(variants)
    return _strict("Output", actions=(list[item], Field(max_length=max_items)))


def _union(variants: list[type[BaseModel]]) -> Any:
    from typing import Union

    return Union[tuple(variants)]  # noqa: UP007  (built from a runtime list)


def grammar_schema(model: type[BaseModel]) -> dict:
    """``model_json_schema()`` with references inlined and titles dropped, the form grammar builders take best."""
    raw = model.model_json_schema()
    defs = raw.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {k: inline(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return inline(raw)

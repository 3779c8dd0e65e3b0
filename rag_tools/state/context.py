"""``ToolContext``: the per-thread state the server owns, one pydantic model per namespace.

The frontend sees a flat snapshot: the emitted fields of every namespace side by side (optionally
under ``state_key``). Two rules keep that cheap and safe:

- Field ownership. A model may declare ``client_fields`` (the frontend may propose them, e.g. the
  document filter) and ``server_only_fields`` (persisted, never emitted: caches, registries).
  Everything else is server-owned and emitted.
- Structural sharing. Items that are frozen pydantic models (citations, search records, QA entries)
  are dumped once (without their ``None`` fields) and the same dict is reused in every later
  snapshot, so building a snapshot costs one pass over the items, and the delta engine skips
  unchanged items by identity. Snapshots are therefore read-only: copy before mutating.
- Emitted views. An item model may define ``emitted() -> dict``: what the client gets of it (a
  card's excerpt rather than its whole passage); ``read_field`` / ``read_item`` give it whole, as
  its ``read_view() -> dict`` when it has one (a citation card keeps its documented keys).
- Emit windows. A growing collection field may be emitted only in part: ``emit_limits`` maps a
  field to how many of its latest items (dict insertion order, list order) the snapshot carries.
  The rest stays in the model, persisted, and readable by id (``read_field`` / ``read_item``), so
  the state a client receives stops growing once the window is full while nothing is forgotten.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from copy import copy
from functools import cache
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails, to_jsonable_python

__all__ = ["StateCollisionError", "StateModel", "ToolContext"]

M = TypeVar("M", bound=BaseModel)

_Cache = dict[int, tuple[BaseModel, Any]]


class StateCollisionError(ValueError):
    """Two namespaces would put the same field into the flat snapshot."""


class StateModel(BaseModel):
    """Optional base for namespace models that declares who owns which field.

    ``client_fields`` may be proposed by the frontend; ``server_only_fields`` are persisted but never
    emitted. Plain ``BaseModel`` namespaces work too: all their fields are server-owned and emitted.
    """

    client_fields: ClassVar[frozenset[str]] = frozenset()
    server_only_fields: ClassVar[frozenset[str]] = frozenset()


def _client_fields(model: BaseModel) -> frozenset[str]:
    return getattr(type(model), "client_fields", frozenset())


def _server_only(model: BaseModel) -> frozenset[str]:
    return getattr(type(model), "server_only_fields", frozenset())


def _emitted_fields(model: BaseModel) -> tuple[str, ...]:
    return _emitted_names(type(model))


@cache
def _emitted_names(model_type: type[BaseModel]) -> tuple[str, ...]:
    """A model class's emitted fields, worked out once per class: every snapshot asks."""
    hidden = getattr(model_type, "server_only_fields", frozenset())
    return tuple(name for name in model_type.model_fields if name not in hidden)


class ToolContext:
    """Namespaced state of one conversation thread.

    ``register``/``get``/``get_or_create`` manage namespaces; ``build_state_snapshot`` gives the
    AG-UI state; ``dump_namespaces``/``load_namespace`` persist it; ``apply_client_proposal`` takes
    what the frontend may change and reports whether its copy diverged.
    """

    def __init__(self, state_key: str | None = None, emit_limits: Mapping[str, int] | None = None) -> None:
        self.state_key = state_key
        self._emit_limits: dict[str, int] = dict(emit_limits or {})
        self._namespaces: dict[str, BaseModel] = {}
        self._owners: dict[str, str] = {}  # emitted field -> namespace
        self._dumps: dict[str, dict[str, Any]] = {}
        self._item_cache: dict[str, _Cache] = {}
        self._pending: dict[str, dict[str, Any]] = {}  # stored data whose model type is not known yet
        self.version = 0  # bumped on every change: a cheap "did anything change since?" check

    @classmethod
    def from_dump(cls, data: Mapping[str, Mapping[str, Any]], state_key: str | None = None) -> ToolContext:
        """A context over persisted ``dump_namespaces()`` data.

        Namespaces are typed lazily: ``get_or_create(ns, T)`` (or ``prepare_context``) validates the
        stored data as ``T``. Namespaces nobody asks for are kept as they are and saved again.
        """
        context = cls(state_key)
        context._pending = {ns: dict(values) for ns, values in data.items()}
        return context

    def view(self) -> ToolContext:
        """A copy to change for one reader without touching this context: each namespace's model is
        copied shallowly, so a change must replace a field's value, never mutate it in place."""
        clone = type(self)(self.state_key, self._emit_limits)
        for namespace, model in self._namespaces.items():
            clone.register(namespace, model.model_copy())
        clone._pending = dict(self._pending)
        return clone

    # -- namespaces --------------------------------------------------------------------------

    def register(self, namespace: str, model: BaseModel) -> None:
        """Add (or replace) ``namespace``; a field already emitted by another namespace is an error."""
        if not isinstance(model, BaseModel):
            raise TypeError(
                f"namespace {namespace!r} needs a pydantic model instance, got {type(model).__name__}"
            )
        for name in _emitted_fields(model):
            owner = self._owners.get(name)
            if owner is not None and owner != namespace:
                raise StateCollisionError(
                    f"field {name!r} of namespace {namespace!r} ({type(model).__name__}) collides with "
                    f"namespace {owner!r} ({type(self._namespaces[owner]).__name__}) in the flat state snapshot"
                )
        if namespace in self._namespaces:
            self._forget_fields(namespace)
        self._pending.pop(namespace, None)
        self._namespaces[namespace] = model
        for name in _emitted_fields(model):
            self._owners[name] = namespace
        self.mark_changed(namespace)

    def _forget_fields(self, namespace: str) -> None:
        for name in [f for f, ns in self._owners.items() if ns == namespace]:
            del self._owners[name]

    def unregister(self, namespace: str) -> None:
        """Drop ``namespace`` (no error when absent)."""
        self._pending.pop(namespace, None)
        if self._namespaces.pop(namespace, None) is not None:
            self._forget_fields(namespace)
            self._item_cache.pop(namespace, None)
            self.mark_changed(namespace)

    def has(self, namespace: str) -> bool:
        """Whether the thread holds ``namespace`` (registered, or stored and not typed yet)."""
        return namespace in self._namespaces or namespace in self._pending

    def get(self, namespace: str, type: type[M] | None = None) -> Any:
        """The model of ``namespace``; ``None`` when absent or not an instance of ``type``."""
        model = self._namespaces.get(namespace)
        if model is None or (type is not None and not isinstance(model, type)):
            return None
        return model

    def get_or_create(self, namespace: str, type: type[M]) -> M:
        """The model of ``namespace``, registering ``type()`` first when absent.

        A namespace holding another type is an error rather than a silent replacement.
        """
        model = self._namespaces.get(namespace)
        if model is None:
            stored = self._pending.get(namespace)
            model = type() if stored is None else type.model_validate(stored)
            self.register(namespace, model)
            return model
        if not isinstance(model, type):
            raise TypeError(f"namespace {namespace!r} holds {model.__class__.__name__}, not {type.__name__}")
        return model

    @property
    def namespaces(self) -> Mapping[str, BaseModel]:
        """Registered namespaces (read-only view)."""
        return dict(self._namespaces)

    @property
    def emit_limits(self) -> Mapping[str, int]:
        """Emitted field -> how many of its latest items the snapshot carries (read-only view)."""
        return dict(self._emit_limits)

    def set_emit_limits(self, limits: Mapping[str, int]) -> None:
        """Window the given collection fields in snapshots (see the module docstring)."""
        if any(size < 0 for size in limits.values()):
            raise ValueError(f"emit limits must not be negative: {dict(limits)}")
        self._emit_limits.update(limits)
        for namespace in self._namespaces:
            self.mark_changed(namespace)

    def mark_changed(self, namespace: str) -> None:
        """Tell the context that ``namespace``'s model was mutated in place."""
        self._dumps.pop(namespace, None)
        self.version += 1

    # -- persistence -------------------------------------------------------------------------

    def dump_namespaces(self) -> dict[str, dict[str, Any]]:
        """Every namespace's full data (server-only fields included), keyed by namespace."""
        dump = {ns: dict(values) for ns, values in self._pending.items()}
        dump.update((ns, model.model_dump(mode="json")) for ns, model in self._namespaces.items())
        return dump

    def load_namespace(self, namespace: str, type: type[M], data: Mapping[str, Any]) -> M:
        """Validate ``data`` as ``type`` and register it under ``namespace``."""
        model = type.model_validate(data)
        self.register(namespace, model)
        return model

    def freeze(self) -> dict[str, Any]:
        """A cheap copy of every namespace as it is now, to dump later with ``dump_frozen``.

        Models are copied one container deep: their dicts, lists and sets are copied and the items
        in them shared, which is safe for the items this state keeps (frozen models and plain
        values: the rule the structural sharing of snapshots relies on too).
        """
        frozen: dict[str, Any] = {ns: dict(values) for ns, values in self._pending.items()}
        for namespace, model in self._namespaces.items():
            containers = {k: copy(v) for k, v in model.__dict__.items() if isinstance(v, dict | list | set)}
            frozen[namespace] = model.model_copy(update=containers)
        return frozen

    @staticmethod
    def dump_frozen(frozen: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """What ``dump_namespaces`` gave when ``freeze`` was called."""
        return {
            ns: value.model_dump(mode="json") if isinstance(value, BaseModel) else dict(value)
            for ns, value in frozen.items()
        }

    def branch_dump(
        self, dump: Mapping[str, Mapping[str, Any]] | None = None, *, exclude: Collection[str] = ()
    ) -> dict[str, dict[str, Any]]:
        """The state a conversation branch owns: every namespace but ``exclude``, client fields left out.

        ``dump`` is a ``dump_namespaces()`` result to take it from (default: a fresh one). Citations,
        searches and QA history follow the branch of the conversation that made them; client-owned
        fields (the document filter) and ``exclude``d namespaces (settings of the whole thread)
        do not.
        """
        dump = self.dump_namespaces() if dump is None else dump
        out: dict[str, dict[str, Any]] = {}
        for namespace, values in dump.items():
            if namespace in exclude:
                continue
            model = self._namespaces.get(namespace)
            client = _client_fields(model) if model is not None else frozenset()
            out[namespace] = {k: v for k, v in values.items() if k not in client} if client else dict(values)
        return out

    def restore_branch(self, data: Mapping[str, Mapping[str, Any]], *, exclude: Collection[str] = ()) -> None:
        """Make ``data`` (a ``branch_dump``) the branch-owned state; the rest keeps its values.

        Every namespace but ``exclude`` is replaced by its data in ``data`` (its defaults when
        absent), keeping its client-owned fields as they are. Invalid data raises
        ``ValidationError`` before anything changes.
        """
        staged: list[tuple[str, BaseModel]] = []
        for namespace, model in self._namespaces.items():
            if namespace in exclude:
                continue
            keep = {name: getattr(model, name) for name in _client_fields(model)}
            fresh = type(model).model_validate(dict(data.get(namespace, {})))
            for name, value in keep.items():
                object.__setattr__(fresh, name, value)
            staged.append((namespace, fresh))
        for namespace, fresh in staged:
            self.register(namespace, fresh)
        for namespace in [ns for ns in self._pending if ns not in exclude and ns not in data]:
            del self._pending[namespace]
        for namespace, values in data.items():
            if namespace not in self._namespaces and namespace not in exclude:
                self._pending[namespace] = dict(values)
        self.version += 1

    # -- snapshots ---------------------------------------------------------------------------

    def build_state_snapshot(self) -> dict[str, Any]:
        """The AG-UI state: emitted fields of all namespaces, flat, under ``state_key`` if set."""
        flat: dict[str, Any] = {}
        for namespace, model in self._namespaces.items():
            dump = self._dumps.get(namespace)
            if dump is None:
                dump = self._dump_namespace(namespace, model)
            flat.update(dump)
        return {self.state_key: flat} if self.state_key else flat

    def _dump_namespace(self, namespace: str, model: BaseModel) -> dict[str, Any]:
        old = self._item_cache.get(namespace, {})
        new: _Cache = {}
        limits = self._emit_limits
        dump = {
            name: _dump_value(_window(getattr(model, name), limits.get(name)), old, new)
            for name in _emitted_fields(model)
        }
        self._item_cache[namespace] = new
        self._dumps[namespace] = dump
        return dump

    def read_field(self, name: str) -> Any:
        """The whole of an emitted field, beyond its emit window; ``KeyError`` for an unknown field."""
        namespace = self._owners.get(name)
        if namespace is None:
            raise KeyError(name)
        return _dump_value(getattr(self._namespaces[namespace], name), {}, {}, whole=True)

    def read_item(self, name: str, key: str) -> Any:
        """One item of an emitted collection field by its key (dict key, else item ``id``, else index).

        ``KeyError`` when there is no such field or item.
        """
        namespace = self._owners.get(name)
        if namespace is None:
            raise KeyError(name)
        value = getattr(self._namespaces[namespace], name)
        if isinstance(value, Mapping):
            index = _index(key)
            item = value.get(key) if key in value else value.get(index) if index is not None else None
            if item is None:
                raise KeyError(key)
            return _dump_value(item, {}, {}, whole=True)
        if isinstance(value, list | tuple):
            for item in value:
                if getattr(item, "id", None) == key:
                    return _dump_value(item, {}, {}, whole=True)
            index = _index(key)
            if index is not None and index < len(value):
                return _dump_value(value[index], {}, {}, whole=True)
        raise KeyError(key)

    def _unwrap(self, snapshot: Mapping[str, Any]) -> Mapping[str, Any]:
        if not isinstance(snapshot, Mapping):
            raise TypeError(f"state must be a JSON object, got {type(snapshot).__name__}")
        if self.state_key is None:
            return snapshot
        inner = snapshot.get(self.state_key, {})
        if not isinstance(inner, Mapping):
            raise TypeError(f"state[{self.state_key!r}] must be a JSON object, got {type(inner).__name__}")
        return inner

    def restore_state_snapshot(self, snapshot: Mapping[str, Any]) -> None:
        """Update registered namespaces in place from a flat snapshot; unknown keys are ignored.

        A snapshot carries what the context emits, not all it keeps (a card's excerpt, the latest
        items of a windowed field), so what it carries as the context emits it now is left as it
        is: a field equal to its emitted value is not touched, and in a collection that changed,
        items equal to their emitted view keep their whole model and the items beyond the emit
        window (which no snapshot holds) stay. Restoring this context's own snapshot therefore
        changes nothing. All namespaces are validated before any is changed: a wrong field type
        raises ``pydantic.ValidationError`` naming the field and leaves the context as it was.
        """
        given = self._unwrap(snapshot)
        emitted = self._unwrap(self.build_state_snapshot())
        changed: dict[str, Any] = {}
        for name, value in given.items():
            namespace = self._owners.get(name)
            if namespace is None or name not in emitted or value == emitted[name]:
                continue
            kept = getattr(self._namespaces[namespace], name)
            changed[name] = _merge_restored(kept, emitted[name], value)
        self._apply(changed, client_only=False)

    def apply_client_proposal(self, state: Mapping[str, Any] | None) -> bool:
        """Take the client-owned fields of a client's ``state``; return whether its copy diverged.

        Server-owned fields are never taken. The result is ``True`` when the client's state, after
        its proposal is applied, still differs from the server's snapshot: the caller then sends a
        STATE_SNAPSHOT. Invalid client-owned values raise ``ValidationError`` and change nothing.
        """
        proposal = self._unwrap(state or {})
        snapshot = self.build_state_snapshot()
        # No proposal, or the server's own snapshot coming back (the adapter hands every run the
        # state it was given), has nothing to take; the comparison is cheap since it shares the
        # cached dumps' objects.
        if proposal and proposal != self._unwrap(snapshot):
            self._apply(proposal, client_only=True)
            snapshot = self.build_state_snapshot()
        if self.state_key is None:
            return dict(proposal) != snapshot
        return dict(state or {}) != snapshot

    def _apply(self, flat: Mapping[str, Any], *, client_only: bool) -> None:
        # Validate every field on shallow copies first, then commit: all or nothing.
        staged: list[tuple[str, BaseModel, dict[str, Any]]] = []
        errors: list[InitErrorDetails] = []
        for namespace, model in self._namespaces.items():
            allowed = _client_fields(model) if client_only else set(_emitted_fields(model))
            names = [name for name in type(model).model_fields if name in allowed and name in flat]
            if not names:
                continue
            clone = model.model_copy()
            for name in names:
                try:
                    clone.__pydantic_validator__.validate_assignment(clone, name, flat[name])
                except ValidationError as exc:
                    errors.extend(exc.errors())  # type: ignore[arg-type]
            staged.append((namespace, model, {name: getattr(clone, name) for name in names}))
        if errors:
            raise ValidationError.from_exception_data("state", errors)
        for namespace, model, values in staged:
            changed = {name: v for name, v in values.items() if getattr(model, name) != v}
            for name, value in changed.items():
                object.__setattr__(model, name, value)
            if changed:
                self.mark_changed(namespace)


def _merge_restored(kept: Any, emitted: Any, given: Any) -> Any:
    """A collection field's restored value: ``given``, with the items it carries unchanged (equal
    to ``emitted``, the field as the context emits it) taken from ``kept`` (as the model holds them
    whole), and ``kept``'s items beyond the emit window, which ``given`` cannot carry, kept."""
    if isinstance(kept, dict) and isinstance(emitted, dict) and isinstance(given, Mapping):
        by_key = {str(k): v for k, v in kept.items()}
        merged: dict[Any, Any] = {k: v for k, v in kept.items() if str(k) not in emitted}
        for key, item in given.items():
            same = key in emitted and emitted[key] == item and key in by_key
            merged[key] = by_key[key] if same else item
        return merged
    if isinstance(kept, list | tuple) and isinstance(emitted, list) and isinstance(given, list):
        hidden = list(kept[: len(kept) - len(emitted)])
        shown = kept[len(hidden) :]
        return hidden + [
            shown[i] if i < len(emitted) and emitted[i] == item else item for i, item in enumerate(given)
        ]
    return given


def _window(value: Any, limit: int | None) -> Any:
    """The latest ``limit`` items of a dict or list (all of them without a limit)."""
    if limit is None or not isinstance(value, dict | list | tuple) or len(value) <= limit:
        return value
    if isinstance(value, dict):
        keys = list(value)[len(value) - limit :]
        return {k: value[k] for k in keys}
    return value[len(value) - limit :]


def _index(key: str) -> int | None:
    """``key`` as an item index when it is one in ASCII digits (``str.isdigit`` also takes ``①``)."""
    return int(key) if key.isascii() and key.isdigit() else None


def _dump_value(value: Any, old: _Cache, new: _Cache, *, whole: bool = False) -> Any:
    """JSON-ready ``value``; frozen models reuse their previous dump (same dict object).

    Items are dumped as their ``emitted()`` view when they have one, unless ``whole``.
    """
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, BaseModel):
        if whole:
            view = getattr(value, "read_view", None)
            return view() if view is not None else value.model_dump(mode="json", exclude_none=True)
        if not value.model_config.get("frozen"):
            return value.model_dump(mode="json")
        key = id(value)
        entry = old.get(key)
        if entry is None or entry[0] is not value:
            view = getattr(value, "emitted", None)
            entry = (value, view() if view is not None else value.model_dump(mode="json", exclude_none=True))
        new[key] = entry
        return entry[1]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():  # the hot loop of big namespaces: cached items first
            entry = None if whole else old.get(id(v))
            if entry is not None and entry[0] is v:
                new[id(v)] = entry
                out[k if type(k) is str else str(k)] = entry[1]
            else:
                out[k if type(k) is str else str(k)] = _dump_value(v, old, new, whole=whole)
        return out
    if isinstance(value, list | tuple):
        return [_dump_value(v, old, new, whole=whole) for v in value]
    return to_jsonable_python(value)

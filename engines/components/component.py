"""A parser of a component binary's top level: enough to rebuild its core wiring.

Records, in section order, every definition that adds to an index space the wiring
needs: core modules and instances, core funcs/tables/memories/globals, component funcs,
instances and types. Anything that would need a full component runtime (instances of
nested components that hold code, component-defined resources, async canonical
built-ins, a start function) is refused with `UnsupportedComponent`, so a component is
either decomposed faithfully or not at all. (Nested components without code, such as
componentize-py's shim that only re-exports types and a function, are allowed.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engines.wasm_binary import read_uleb

COMPONENT_PREAMBLE = b"\0asm\x0d\x00\x01\x00"
CORE_SORTS = {
    0x00: "func",
    0x01: "table",
    0x02: "memory",
    0x03: "global",
    0x04: "tag",
    0x10: "type",
    0x11: "module",
    0x12: "instance",
}
SORTS = {0x01: "func", 0x02: "value", 0x03: "type", 0x04: "component", 0x05: "instance"}


class UnsupportedComponent(ValueError):
    """The component uses a feature the decomposition does not reproduce."""


class _Reader:
    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise ValueError("truncated component section")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def u32(self) -> int:
        value, self.pos = read_uleb(self.data, self.pos)
        return value

    def name(self) -> str:
        length = self.u32()
        text = self.data[self.pos : self.pos + length].decode()
        self.pos += length
        return text

    def sort(self) -> str:
        tag = self.byte()
        if tag == 0x00:
            core = self.byte()
            if core not in CORE_SORTS:
                raise ValueError(f"unknown core sort {core:#x}")
            return "core " + CORE_SORTS[core]
        if tag not in SORTS:
            raise ValueError(f"unknown sort {tag:#x}")
        return SORTS[tag]

    def extern_name(self) -> str:
        tag = self.byte()
        if tag not in (0x00, 0x01):
            raise ValueError(f"unknown import/export name tag {tag:#x}")
        name = self.name()
        if tag == 0x01:  # a version suffix follows
            self.name()
        return name

    def externdesc(self) -> str:
        tag = self.byte()
        if tag == 0x00:  # core module: 0x11 + core type index
            self.byte()
            self.u32()
            return "core module"
        if tag in (0x01, 0x04, 0x05):
            self.u32()
            return {0x01: "func", 0x04: "component", 0x05: "instance"}[tag]
        if tag == 0x03:  # type bound: (eq i) or (sub resource)
            if self.byte() == 0x00:
                self.u32()
            return "type"
        if tag == 0x02:
            raise UnsupportedComponent("value imports and exports are not supported")
        raise ValueError(f"unknown extern description {tag:#x}")


@dataclass(frozen=True)
class CanonOptions:
    memory: int | None = None
    realloc: int | None = None
    post_return: int | None = None
    utf8: bool = True


@dataclass(frozen=True)
class Instantiate:
    """A core instance made by instantiating core module `module` with `args`
    (import module name -> core instance index)."""

    module: int
    args: dict[str, int]


@dataclass(frozen=True)
class Bag:
    """A core instance made of inline exports: name -> (core sort, index)."""

    items: dict[str, tuple[str, int]]


# Same shape each: one small record per kind of definition, so the unions below type them.
@dataclass(frozen=True)
class Alias:
    """An export `name` of (core or component) instance `instance`."""

    instance: int
    name: str


@dataclass(frozen=True)
class Lower:
    """A core func lowered from component func `func`."""

    func: int
    options: CanonOptions


@dataclass(frozen=True)
class ResourceDrop:
    type_index: int


@dataclass(frozen=True)
class Lift:
    core_func: int
    options: CanonOptions


@dataclass(frozen=True)
class Imported:
    name: str


@dataclass(frozen=True)
class Exported:
    """A new index for an item exported from the same index space."""

    index: int


@dataclass(frozen=True)
class Other:
    """A definition the wiring never needs to look into."""

    what: str


CoreFunc = Alias | Lower | ResourceDrop | Other
Func = Alias | Lift | Imported | Exported | Other
InstanceEntry = Alias | Imported | Exported | Other
TypeEntry = Alias | Imported | Exported | Other


@dataclass
class Component:
    modules: list[bytes] = field(default_factory=list)
    """Core module index space -> module bytes."""
    core_instances: list[Instantiate | Bag] = field(default_factory=list)
    core_funcs: list[CoreFunc] = field(default_factory=list)
    core_items: dict[str, list[Alias | Other]] = field(
        default_factory=lambda: {"table": [], "memory": [], "global": []}
    )
    """Core table, memory and global index spaces (func is `core_funcs`)."""
    funcs: list[Func] = field(default_factory=list)
    instances: list[InstanceEntry] = field(default_factory=list)
    types: list[TypeEntry] = field(default_factory=list)
    exports: dict[str, tuple[str, int]] = field(default_factory=dict)

    def imported_instance(self, index: int) -> str:
        """The import name of component instance `index` (following exports)."""
        entry = self.instances[index]
        while isinstance(entry, Exported):
            entry = self.instances[entry.index]
        if not isinstance(entry, Imported):
            raise UnsupportedComponent(f"component instance {index} is not an import")
        return entry.name

    def lowered_import(self, func_index: int) -> tuple[str, str]:
        """(interface, function) of a component func aliased from an imported instance."""
        entry = self.funcs[func_index]
        while isinstance(entry, Exported):
            entry = self.funcs[entry.index]
        if not isinstance(entry, Alias):
            raise UnsupportedComponent(f"lowered func {func_index} is not an imported function")
        return self.imported_instance(entry.instance), entry.name

    def imported_resource(self, type_index: int) -> tuple[str, str]:
        """(interface, resource) of a resource type aliased from an imported instance."""
        entry = self.types[type_index]
        while isinstance(entry, Exported):
            entry = self.types[entry.index]
        if not isinstance(entry, Alias):
            raise UnsupportedComponent(
                f"type {type_index} is not an imported resource (component-defined "
                "resources are not supported)"
            )
        return self.imported_instance(entry.instance), entry.name

    def lifted(self, export: str) -> Lift:
        """The lift behind the component's exported function `export`."""
        sort, index = self.exports.get(export, ("", -1))
        if sort != "func":
            raise UnsupportedComponent(f"the component exports no function {export!r}")
        entry = self.funcs[index]
        while isinstance(entry, Exported):
            entry = self.funcs[entry.index]
        if not isinstance(entry, Lift):
            raise UnsupportedComponent(f"export {export!r} is not a lifted core function")
        return entry


def _options(reader: _Reader) -> CanonOptions:
    memory = realloc = post_return = None
    utf8 = True
    for _ in range(reader.u32()):
        tag = reader.byte()
        if tag == 0x00:
            utf8 = True
        elif tag in (0x01, 0x02):
            utf8 = False
        elif tag == 0x03:
            memory = reader.u32()
        elif tag == 0x04:
            realloc = reader.u32()
        elif tag == 0x05:
            post_return = reader.u32()
        else:
            raise UnsupportedComponent(f"canonical option {tag:#x} (async) is not supported")
    return CanonOptions(memory, realloc, post_return, utf8)


CODE_SECTIONS = frozenset({1, 2, 8, 9})
"""Core modules, core instances, canonical functions, start: what makes a component run
code of its own."""


def _without_code(data: bytes, start: int, end: int) -> bool:
    """Whether the nested component in data[start:end] (and any component nested in it)
    has no code of its own."""
    if data[start : start + 8] != COMPONENT_PREAMBLE:
        raise ValueError("malformed nested component")
    pos = start + 8
    while pos < end:
        section_id = data[pos]
        size, body = read_uleb(data, pos + 1)
        if section_id in CODE_SECTIONS:
            return False
        if section_id == 4 and not _without_code(data, body, body + size):
            return False
        pos = body + size
    return True


class _Parser:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.component = Component()
        self.components_without_code: list[bool] = []
        """The nested component index space: whether each has no code of its own."""

    def add(self, sort: str, entry: Alias | Imported | Exported | Other) -> None:
        """Add `entry` to the index space of `sort`."""
        comp = self.component
        if sort == "core func":
            assert not isinstance(entry, Imported | Exported)
            comp.core_funcs.append(entry)
        elif sort in ("core table", "core memory", "core global"):
            assert isinstance(entry, Alias | Other)
            comp.core_items[sort[5:]].append(entry)
        elif sort == "core module":
            raise UnsupportedComponent("aliased or exported core modules are not supported")
        elif sort == "core instance":
            raise UnsupportedComponent("aliased core instances are not supported")
        elif sort == "func":
            comp.funcs.append(entry)
        elif sort == "instance":
            comp.instances.append(entry)
        elif sort == "type":
            comp.types.append(entry)
        elif sort == "component":  # imported or aliased: its code is unknown
            flags = self.components_without_code
            flags.append(isinstance(entry, Exported) and flags[entry.index])
        # core types and tags, values: not needed by the wiring

    def section(self, section_id: int, reader: _Reader) -> None:
        comp = self.component
        if section_id == 0:  # custom
            return
        if section_id == 1:
            comp.modules.append(self.data[reader.pos : reader.end])
        elif section_id == 2:
            for _ in range(reader.u32()):
                if reader.byte() == 0x00:
                    module = reader.u32()
                    args = {}
                    for _ in range(reader.u32()):
                        arg = reader.name()
                        if reader.byte() != 0x12:
                            raise ValueError("a core instantiation argument is not an instance")
                        args[arg] = reader.u32()
                    comp.core_instances.append(Instantiate(module, args))
                else:
                    items = {}
                    for _ in range(reader.u32()):
                        export = reader.name()
                        core_sort = reader.byte()
                        if core_sort not in CORE_SORTS:
                            raise ValueError(f"unknown core sort {core_sort:#x}")
                        items[export] = (CORE_SORTS[core_sort], reader.u32())
                    comp.core_instances.append(Bag(items))
        elif section_id == 3:  # core types: not needed
            return
        elif section_id == 4:
            self.components_without_code.append(_without_code(self.data, reader.pos, reader.end))
        elif section_id == 5:
            for _ in range(reader.u32()):
                if reader.byte() == 0x00:
                    nested = reader.u32()
                    if not self.components_without_code[nested]:
                        raise UnsupportedComponent(
                            "instances of nested components with code are not supported"
                        )
                    for _ in range(reader.u32()):
                        reader.name()
                        reader.sort()
                        reader.u32()
                    comp.instances.append(Other("instance of a nested component without code"))
                    continue
                for _ in range(reader.u32()):
                    reader.extern_name()
                    reader.sort()
                    reader.u32()
                comp.instances.append(Other("instance of inline exports"))
        elif section_id == 6:
            for _ in range(reader.u32()):
                sort = reader.sort()
                target = reader.byte()
                if target in (0x00, 0x01):
                    entry: Alias | Other = Alias(reader.u32(), reader.name())
                else:
                    reader.u32()
                    reader.u32()
                    entry = Other("outer alias")
                self.add(sort, entry)
        elif section_id == 7:
            for _ in range(reader.u32()):
                comp.types.append(Other("defined type"))
            return  # type bodies are not needed: only the count matters
        elif section_id == 8:
            self.canon(reader)
        elif section_id == 9:
            raise UnsupportedComponent("a component start function is not supported")
        elif section_id == 10:
            for _ in range(reader.u32()):
                name = reader.extern_name()
                desc = reader.externdesc()
                if desc == "core module":
                    raise UnsupportedComponent("imported core modules are not supported")
                self.add(desc, Imported(name))
        elif section_id == 11:
            for _ in range(reader.u32()):
                name = reader.extern_name()
                sort = reader.sort()
                index = reader.u32()
                if reader.byte() == 0x01:
                    reader.externdesc()
                comp.exports[name] = (sort, index)
                self.add(sort, Exported(index))
        else:
            raise ValueError(f"unknown component section {section_id}")

    def canon(self, reader: _Reader) -> None:
        comp = self.component
        for _ in range(reader.u32()):
            kind = reader.byte()
            if kind == 0x00:
                if reader.byte() != 0x00:
                    raise ValueError("malformed canon lift")
                core_func = reader.u32()
                options = _options(reader)
                reader.u32()  # the function type
                comp.funcs.append(Lift(core_func, options))
            elif kind == 0x01:
                if reader.byte() != 0x00:
                    raise ValueError("malformed canon lower")
                func = reader.u32()
                comp.core_funcs.append(Lower(func, _options(reader)))
            elif kind == 0x03:
                comp.core_funcs.append(ResourceDrop(reader.u32()))
            else:
                raise UnsupportedComponent(f"canonical built-in {kind:#x} is not supported")


def parse(data: bytes) -> Component:
    """Parse the top level of a component binary."""
    if data[:8] != COMPONENT_PREAMBLE:
        raise ValueError("not a component")
    parser = _Parser(data)
    pos = 8
    try:
        while pos < len(data):
            section_id = data[pos]
            size, start = read_uleb(data, pos + 1)
            end = start + size
            if end > len(data):
                raise ValueError("truncated component")
            parser.section(section_id, _Reader(data, start, end))
            pos = end
    except IndexError:
        raise ValueError("malformed component: an index or a section is out of range") from None
    return parser.component

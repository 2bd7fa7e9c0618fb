"""The base of every service's settings: one file (YAML or TOML) plus ``HTTPBUS_`` overrides.

Settings are read once, in a service's ``main()``, and passed down as typed, frozen objects;
library code never reads the environment. Precedence, highest first: constructor arguments,
environment (``HTTPBUS_ADMIN_TOKEN``, nested with ``__`` as in
``HTTPBUS_METASTORE__HOSTS``), the config file, the defaults.

**One file for a deployment.** A file with a ``control_plane``, ``producer`` or ``worker``
section is read by all three services: each takes its own section and the shared settings at
the top (:data:`SHARED`: the metastore, the clusters, the audit trail, the admin token, the
endpoint policy, the HTTP server limits) that it has. A top-level key that is neither shared
nor a section is refused, like an unknown key in a section. A file without sections is one
service's file, as before.

Only a service's ``main()`` calls :meth:`SettingsBase.load`; this module defines how.
"""

from __future__ import annotations

import argparse
import os
import socket
import tomllib
from pathlib import Path
from typing import Any, ClassVar, Self, cast

import yaml
from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

SECTIONS = ("control_plane", "producer", "worker")
SHARED = frozenset(
    {"admin_token", "metastore", "clusters", "audit", "endpoint_policy", "http_server"}
)


class DeploymentFile(PydanticBaseSettingsSource):
    """One service's settings from a deployment file: the shared keys it has, then its
    section (which wins)."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any], section: str):
        super().__init__(settings_cls)
        unknown = sorted(set(data) - SHARED - set(SECTIONS))
        if unknown:
            raise ValueError(
                f"config file: {', '.join(unknown)} at the top level: put a service's own "
                f"settings in its section ({', '.join(SECTIONS)}); only "
                f"{', '.join(sorted(SHARED))} are shared"
            )
        own = data.get(section) or {}
        if not isinstance(own, dict):
            raise ValueError(f"config file: {section} must be a mapping of settings")
        fields = settings_cls.model_fields
        self._values = {k: v for k, v in data.items() if k in SHARED and k in fields} | own

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


def read_config(path: Path) -> dict[str, Any]:
    """A settings file's mapping (YAML or TOML)."""
    if path.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(path.read_text()) or {}
    elif path.suffix == ".toml":
        data = tomllib.loads(path.read_text())
    else:
        raise ValueError(f"config file {path} must end in .yaml, .yml or .toml")
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of settings")
    return data


class SettingsBase(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="HTTPBUS_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )
    config_file: ClassVar[Path | None] = None
    section: ClassVar[str] = ""  # its section of a deployment file

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = cls.config_file
        data = read_config(path) if path is not None else {}
        if path is not None and any(name in data for name in SECTIONS):
            sources.append(DeploymentFile(settings_cls, data, cls.section))
        elif path is not None:
            if path.suffix in (".yaml", ".yml"):
                sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
            elif path.suffix == ".toml":
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
            else:
                raise ValueError(f"config file {path} must end in .yaml, .yml or .toml")
        return tuple(sources)

    @classmethod
    def load(cls, config_file: Path | None = None, **overrides: Any) -> Self:
        """Read the settings once, from ``config_file`` (the CLI passes ``--config``, whose
        default is ``HTTPBUS_CONFIG``), the environment and ``overrides``."""
        if config_file is not None and not config_file.exists():
            raise FileNotFoundError(f"config file {config_file} does not exist")
        bound = type(cls.__name__, (cls,), {"config_file": config_file})
        return cast(Self, bound(**overrides))


def seconds(default: float, most: float, description: str) -> Any:
    """A duration setting in seconds: more than 0, at most ``most``.

    Example::

        assign_interval_s: float = seconds(2.0, 300, "how often the leader re-reads")
    """
    return Field(default=default, gt=0, le=most, description=description)


MEMBER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


def listen_host() -> Any:
    """The ``host`` setting of a service: the address it listens on (loopback by default)."""
    return Field(default="127.0.0.1", description="the address it listens on")


def listen_port(default: int, description: str) -> Any:
    """The ``port`` setting of a service: a TCP port, ``default`` unless set."""
    return Field(default=default, ge=1, le=65_535, description=description)


def member_id_field(role: str, description: str) -> Any:
    """The ``member_id`` setting: unique per process, :func:`default_member_id` of ``role``
    unless set."""
    return Field(
        default_factory=lambda: default_member_id(role),
        description=description,
        pattern=MEMBER_ID_PATTERN,
    )


def processes_field() -> Any:
    """The ``processes`` setting of a service that can fork (``core.prefork.Processes``)."""
    return Field(
        default=1,
        description="processes serving the port, each a member of its own (auto: one per core)",
    )


def default_member_id(role: str) -> str:
    """``<role>-<host>-<pid>``: the name a process joins its metastore group under."""
    host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:40].strip("-")
    return f"{role}-{host or 'host'}-{os.getpid()}"


def service_args(
    prog: str, description: str, argv: list[str] | None = None, *, processes: bool = False
) -> tuple[Path | None, dict[str, Any]]:
    """The command line every service's ``__main__`` takes: ``--config`` (default
    ``$HTTPBUS_CONFIG``), ``--host``, ``--port`` (and ``--processes`` where ``processes``);
    returns the file and the overrides."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("HTTPBUS_CONFIG"),
        help="YAML or TOML settings file (default: $HTTPBUS_CONFIG)",
    )
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    if processes:
        parser.add_argument(
            "--processes", help="processes serving the port: a number, or auto (one per core)"
        )
    args = parser.parse_args(argv)
    given = (
        ("host", args.host),
        ("port", args.port),
        ("processes", getattr(args, "processes", None)),
    )
    overrides = {k: v for k, v in given if v is not None}
    return args.config, overrides

"""The base of every service's settings: one file (YAML or TOML) plus ``HTTPBUS_`` overrides.

Settings are read once, in a service's ``main()``, and passed down as typed, frozen objects;
library code never reads the environment. Precedence, highest first: constructor arguments,
environment (``HTTPBUS_ADMIN_TOKEN``, nested with ``__`` as in
``HTTPBUS_METASTORE__HOSTS``), the config file, the defaults.

Only a service's ``main()`` calls :meth:`SettingsBase.load`; this module defines how.
"""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path
from typing import Any, ClassVar, Self, cast

from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)


class SettingsBase(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="HTTPBUS_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )
    config_file: ClassVar[Path | None] = None

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
        if path is not None:
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


def default_member_id(role: str) -> str:
    """``<role>-<host>-<pid>``: the name a process joins its metastore group under."""
    host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:40].strip("-")
    return f"{role}-{host or 'host'}-{os.getpid()}"


def service_args(
    prog: str, description: str, argv: list[str] | None = None
) -> tuple[Path | None, dict[str, Any]]:
    """The command line every service's ``__main__`` takes: ``--config`` (default
    ``$HTTPBUS_CONFIG``), ``--host``, ``--port``; returns the file and the overrides."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("HTTPBUS_CONFIG"),
        help="YAML or TOML settings file (default: $HTTPBUS_CONFIG)",
    )
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    return args.config, overrides

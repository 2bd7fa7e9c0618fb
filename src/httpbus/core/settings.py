"""The base of every service's settings: one file (YAML or TOML) plus ``HTTPBUS_`` overrides.

Settings are read once, in a service's ``main()``, and passed down as typed, frozen objects;
library code never reads the environment. Precedence, highest first: constructor arguments,
environment (``HTTPBUS_ADMIN_TOKEN``, nested with ``__`` as in
``HTTPBUS_METASTORE__HOSTS``), the config file, the defaults.

Only a service's ``main()`` calls :meth:`SettingsBase.load`; this module defines how.
"""

from __future__ import annotations

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

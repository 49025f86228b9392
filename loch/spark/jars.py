"""Find or assemble Iceberg's Spark runtime for the installed PySpark.

Three routes, tried in order by :func:`resolve_jars`:

1. **explicit**: jar paths given as an argument or in ``$LOCH_SPARK_JARS``
   (comma-separated). Used as they are.
2. **pypi**: the runtime jar shipped by the ``snowpark-connect-deps-iceberg`` package,
   plus the shaded Jackson it lacks, rebuilt once from the Jackson jars in
   ``pyspark/jars`` (see :mod:`loch.spark.relocate`), checked against the runtime jar
   (:mod:`loch.spark.check`) and cached under ``$XDG_CACHE_HOME/loch/spark``
   (``~/.cache/loch/spark``).
3. **maven**: coordinates for ``spark.jars.packages``, only when allowed (argument or
   ``$LOCH_SPARK_MAVEN=1``) because Ivy needs a reachable Maven repository. Nothing
   is downloaded here.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import re
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from loch.spark.check import check_references
from loch.spark.errors import SparkSetupError
from loch.spark.relocate import JACKSON_RELOCATION, build_relocated_jar

__all__ = [
    "ENV_JARS",
    "ENV_MAVEN",
    "ICEBERG_DISTRIBUTION",
    "ICEBERG_EXTENSIONS",
    "JACKSON_ARTIFACTS",
    "NESSIE_EXTENSIONS",
    "SparkJars",
    "cache_dir",
    "ensure_shaded_jackson",
    "find_jackson_jars",
    "find_runtime_jar",
    "maven_packages",
    "resolve_jars",
    "spark_versions",
]

ENV_JARS = "LOCH_SPARK_JARS"
ENV_MAVEN = "LOCH_SPARK_MAVEN"
ICEBERG_DISTRIBUTION = "snowpark-connect-deps-iceberg"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
NESSIE_EXTENSIONS = "org.projectnessie.spark.extensions.NessieSparkSessionExtensions"
ICEBERG_MAVEN_VERSION = "1.10.2"
NESSIE_MAVEN_VERSION = "0.104.5"
JACKSON_ARTIFACTS = (
    "jackson-annotations",
    "jackson-core",
    "jackson-databind",
    "jackson-datatype-jsr310",
)
"""The Jackson jars of ``pyspark/jars`` that Iceberg's runtime needs, relocated."""

# Bump when the relocated jar's layout changes, so stale caches are not reused.
_BUILD_FORMAT = 1

Route = Literal["explicit", "pypi", "maven"]


@dataclass(frozen=True)
class SparkJars:
    """How to put Iceberg on Spark's classpath.

    Attributes:
        route: Which route produced this: ``explicit``, ``pypi`` or ``maven``.
        jars: Local jar files for ``spark.jars``.
        packages: Maven coordinates for ``spark.jars.packages``.
        extensions: Classes for ``spark.sql.extensions``.
    """

    route: Route
    jars: tuple[Path, ...] = ()
    packages: tuple[str, ...] = ()
    extensions: tuple[str, ...] = field(default=(ICEBERG_EXTENSIONS,))

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings that load these jars and extensions."""
        conf = {"spark.sql.extensions": ",".join(self.extensions)}
        if self.jars:
            conf["spark.jars"] = ",".join(str(j) for j in self.jars)
        if self.packages:
            conf["spark.jars.packages"] = ",".join(self.packages)
        return conf


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Loch's Spark cache: ``$XDG_CACHE_HOME/loch/spark``, else ``~/.cache/loch/spark``."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "loch" / "spark"


def _pyspark_dir() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SparkSetupError("pyspark is not installed (pip install 'loch[spark]')")
    return Path(next(iter(spec.submodule_search_locations)))


def spark_versions() -> tuple[str, str]:
    """The installed PySpark's ``(major.minor, scala binary version)``, e.g. ``("3.5", "2.12")``.

    Raises:
        SparkSetupError: If PySpark is missing or ships no Scala library.
    """
    jars = _pyspark_dir() / "jars"
    try:
        version = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError as e:
        raise SparkSetupError("pyspark is not installed (pip install 'loch[spark]')") from e
    scala = [
        m.group(1)
        for p in jars.glob("scala-library-*.jar")
        if (m := re.match(r"scala-library-(\d+\.\d+)\.", p.name))
    ]
    if not scala:
        raise SparkSetupError(f"no scala-library jar in {jars}; is pyspark complete?")
    return ".".join(version.split(".")[:2]), scala[0]


def find_runtime_jar() -> Path:
    """The Iceberg Spark runtime jar shipped by ``snowpark-connect-deps-iceberg``.

    The jar must match the installed PySpark's Spark and Scala versions.

    Raises:
        SparkSetupError: If the package is not installed or has no matching jar.
    """
    spark, scala = spark_versions()
    try:
        files = importlib.metadata.files(ICEBERG_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError as e:
        raise SparkSetupError(
            f"pypi route: package '{ICEBERG_DISTRIBUTION}' is not installed "
            "(pip install 'loch[spark]')"
        ) from e
    wanted = re.compile(rf"iceberg-spark-runtime-{re.escape(spark)}_{re.escape(scala)}-.+\.jar")
    for f in files:
        if wanted.fullmatch(f.name):
            path = Path(str(f.locate()))
            if path.is_file():
                return path
    raise SparkSetupError(
        f"pypi route: '{ICEBERG_DISTRIBUTION}' has no iceberg-spark-runtime-{spark}_{scala} "
        "jar matching the installed pyspark"
    )


def find_jackson_jars() -> list[Path]:
    """The Jackson jars (:data:`JACKSON_ARTIFACTS`) that PySpark ships, all one version.

    Raises:
        SparkSetupError: If one is missing or their versions differ.
    """
    jars = _pyspark_dir() / "jars"
    found: list[Path] = []
    for artifact in JACKSON_ARTIFACTS:
        matches = sorted(jars.glob(f"{artifact}-[0-9]*.jar"))
        if not matches:
            raise SparkSetupError(f"pypi route: no {artifact} jar in {jars}")
        found.append(matches[-1])
    versions = {_version(p) for p in found}
    if len(versions) != 1:
        raise SparkSetupError(f"pypi route: Jackson jars of mixed versions in {jars}: {versions}")
    return found


def _version(jar: Path) -> str:
    m = re.search(r"-([0-9][0-9A-Za-z.]*)\.jar$", jar.name)
    return m.group(1) if m else jar.stem


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` where the platform has ``fcntl``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: atomic replace still holds
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _is_complete_jar(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return "META-INF/MANIFEST.MF" in z.NameToInfo
    except (OSError, zipfile.BadZipFile):
        return False


def ensure_shaded_jackson(
    runtime_jar: Path,
    jackson_jars: Sequence[Path] | None = None,
    *,
    directory: Path | None = None,
    verify: bool = True,
) -> Path:
    """The relocated Jackson jar for ``runtime_jar``, built once and then reused.

    The file name carries the Iceberg and Jackson versions. Building holds a lock file
    (so concurrent processes build once), writes a staging file through a temporary
    file, checks it against ``runtime_jar`` with :func:`~loch.spark.check.check_references`
    and only then moves it into place with :func:`os.replace` (so nobody ever sees half
    a jar, or a jar that failed the check).

    Args:
        runtime_jar: Iceberg's runtime jar (its name gives the Iceberg version).
        jackson_jars: Source jars; default :func:`find_jackson_jars`.
        directory: Cache directory; default :func:`cache_dir`.
        verify: Run the static check on a fresh build (a few seconds, once).

    Returns:
        The path of the relocated jar.

    Raises:
        SparkSetupError: If the sources are missing, the build fails or the fresh jar
            leaves references of the runtime jar unresolved.
    """
    sources = list(jackson_jars) if jackson_jars is not None else find_jackson_jars()
    directory = cache_dir() if directory is None else directory
    name = f"iceberg-{_version(runtime_jar)}-shaded-jackson-{_version(sources[0])}"
    name += f"-b{_BUILD_FORMAT}.jar"
    dest = directory / name
    if _is_complete_jar(dest):
        return dest
    reloc = JACKSON_RELOCATION
    staging = directory / f".{name}.{os.getpid()}.staging"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with _lock(directory / f".{name}.lock"):
            if _is_complete_jar(dest):
                return dest
            build_relocated_jar(
                sources,
                staging,
                reloc,
                attributes=[
                    ("Created-By", "loch.spark"),
                    ("Loch-Relocation", f"{reloc.source} -> {reloc.target}"),
                    ("Loch-Sources", " ".join(p.name for p in sources)),
                    ("Loch-For", runtime_jar.name),
                ],
            )
            if verify:
                report = check_references(runtime_jar, [staging])
                if not report.ok:
                    raise SparkSetupError(
                        f"pypi route: the relocated Jackson does not satisfy {runtime_jar.name}: "
                        + report.summary()
                    )
            os.replace(staging, dest)
    except OSError as e:
        raise SparkSetupError(f"pypi route: cannot build the shaded Jackson in {dest}: {e}") from e
    finally:
        staging.unlink(missing_ok=True)
    return dest


def maven_packages(spark: str, scala: str) -> tuple[str, ...]:
    """``spark.jars.packages`` coordinates of Iceberg's runtime and Nessie's SQL extensions."""
    return (
        f"org.apache.iceberg:iceberg-spark-runtime-{spark}_{scala}:{ICEBERG_MAVEN_VERSION}",
        f"org.projectnessie.nessie-integrations:nessie-spark-extensions-{spark}_{scala}:"
        f"{NESSIE_MAVEN_VERSION}",
    )


def _explicit(jars: Sequence[str | Path] | None) -> list[Path] | None:
    if jars is not None:
        given = [Path(j) for j in jars]
        source = "argument"
    elif os.environ.get(ENV_JARS, "").strip():
        given = [Path(p.strip()) for p in os.environ[ENV_JARS].split(",") if p.strip()]
        source = f"${ENV_JARS}"
    else:
        return None
    if not given:
        raise SparkSetupError(f"explicit route: no jar paths in the {source}")
    missing = [str(p) for p in given if not p.is_file()]
    if missing:
        raise SparkSetupError(f"explicit route: jar(s) from the {source} not found: {missing}")
    return [p.resolve() for p in given]


def resolve_jars(
    jars: Sequence[str | Path] | None = None,
    *,
    allow_maven: bool | None = None,
    directory: Path | None = None,
) -> SparkJars:
    """Decide how Spark gets Iceberg, trying explicit jars, then PyPI, then Maven.

    Args:
        jars: Explicit jar paths; overrides ``$LOCH_SPARK_JARS``.
        allow_maven: Fall back to Maven coordinates; default ``$LOCH_SPARK_MAVEN``.
        directory: Cache directory for the rebuilt Jackson; default :func:`cache_dir`.

    Returns:
        The jars or packages and the SQL extensions to configure.

    Raises:
        SparkSetupError: If no route works; the message lists every route's reason.
    """
    explicit = _explicit(jars)
    if explicit is not None:
        return SparkJars("explicit", jars=tuple(explicit))
    try:
        runtime = find_runtime_jar()
        shaded = ensure_shaded_jackson(runtime, directory=directory)
        return SparkJars("pypi", jars=(runtime, shaded))
    except SparkSetupError as e:
        pypi_reason = e.message
        if not pypi_reason.startswith("pypi route"):
            pypi_reason = f"pypi route: {pypi_reason}"
    if allow_maven is None:
        allow_maven = os.environ.get(ENV_MAVEN, "").lower() in ("1", "true", "yes")
    if allow_maven:
        try:
            spark, scala = spark_versions()
        except SparkSetupError as e:
            raise SparkSetupError(f"{pypi_reason}; maven route: {e.message}") from e
        return SparkJars(
            "maven",
            packages=maven_packages(spark, scala),
            extensions=(ICEBERG_EXTENSIONS, NESSIE_EXTENSIONS),
        )
    raise SparkSetupError(
        f"No Iceberg runtime for Spark. explicit route: no jars given (argument or "
        f"${ENV_JARS}); {pypi_reason}; maven route: not enabled (pass allow_maven=True or "
        f"set {ENV_MAVEN}=1 where a Maven repository is reachable)"
    )

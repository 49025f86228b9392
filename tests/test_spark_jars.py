"""Iceberg's Spark runtime: class-file relocation, the cached shaded Jackson, routes.

These tests need the ``spark`` extra (pyspark's Jackson jars and the PyPI-shipped
Iceberg runtime) but never start a JVM.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

if importlib.util.find_spec("pyspark") is None:
    pytest.skip("pyspark is not installed (spark extra)", allow_module_level=True)

from loch.errors import LochError
from loch.spark import (
    JACKSON_RELOCATION,
    Relocation,
    SparkSetupError,
    build_relocated_jar,
    cache_dir,
    catalog_conf,
    check_references,
    ensure_shaded_jackson,
    find_jackson_jars,
    find_runtime_jar,
    nessie_uri,
    resolve_jars,
    warehouse_uri,
)
from loch.spark import jars as jars_module
from loch.spark.classfile import parse_class, parse_constant_pool

SHADED = "org/apache/iceberg/shaded/com/fasterxml/jackson/"


def _jackson(artifact: str) -> Path:
    return next(p for p in find_jackson_jars() if p.name.startswith(artifact + "-2"))


@pytest.fixture(scope="module")
def runtime_jar() -> Path:
    try:
        return find_runtime_jar()
    except SparkSetupError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def shaded_jar(runtime_jar: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_shaded_jackson(runtime_jar, directory=tmp_path_factory.mktemp("cache"))


@pytest.fixture
def no_env_jars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCH_SPARK_JARS", raising=False)
    monkeypatch.delenv("LOCH_SPARK_MAVEN", raising=False)


# --- relocation of single values and class files --------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (b"com/fasterxml/jackson/core/JsonParser", SHADED.encode() + b"core/JsonParser"),
        (
            b"(Lcom/fasterxml/jackson/core/JsonParser;)Lcom/fasterxml/jackson/databind/JsonNode;",
            b"(L"
            + SHADED.encode()
            + b"core/JsonParser;)L"
            + SHADED.encode()
            + b"databind/JsonNode;",
        ),
        (
            b"com.fasterxml.jackson.databind.ext.Java7Handlers",
            b"org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ext.Java7Handlers",
        ),
        # already relocated, another package, or not a package prefix: unchanged
        (SHADED.encode() + b"core/JsonParser", SHADED.encode() + b"core/JsonParser"),
        (b"com/fasterxml/classmate/TypeResolver", b"com/fasterxml/classmate/TypeResolver"),
        (b"com.fasterxml.jacksonx.Foo", b"com.fasterxml.jacksonx.Foo"),
        (b"", b""),
    ],
)
def test_relocation_rewrites_slash_and_dot_forms(before: bytes, after: bytes) -> None:
    assert JACKSON_RELOCATION.rewrite(before) == after
    assert JACKSON_RELOCATION.rewrite(after) == after  # idempotent


def test_relocation_rejects_empty_or_equal_prefixes() -> None:
    with pytest.raises(ValueError):
        Relocation("a.b", "a.b")
    with pytest.raises(ValueError):
        Relocation("", "x")


def test_relocated_class_constant_pool() -> None:
    with zipfile.ZipFile(_jackson("jackson-databind")) as z:
        original = z.read("com/fasterxml/jackson/databind/ObjectMapper.class")
    relocated = JACKSON_RELOCATION.rewrite_class(original)
    info, pool = parse_class(relocated)
    old_info, old_pool = parse_class(original)
    assert info.name == SHADED + "databind/ObjectMapper"
    assert info.super_name == SHADED + "core/ObjectCodec"
    assert all(i.startswith(SHADED) or i.startswith("java/") for i in info.interfaces)
    # Same members, descriptors relocated; same number of constant slots and tags.
    assert len(info.methods) == len(old_info.methods)
    assert ("readTree", f"(Ljava/lang/String;)L{SHADED}databind/JsonNode;") in info.methods
    assert ("readTree", "(Ljava/lang/String;)Lcom/fasterxml/jackson/databind/JsonNode;") in (
        old_info.methods
    )
    assert pool.tags == old_pool.tags
    # No Utf8 entry keeps the old prefix; the dotted reflection names are relocated too.
    for value in pool.utf8.values():
        assert "com/fasterxml/jackson/" not in value.replace(SHADED, "")
        assert "com.fasterxml.jackson." not in value.replace(SHADED.replace("/", "."), "")
    # Everything after the pool is copied byte for byte.
    assert relocated[pool.end :] == original[old_pool.end :]


def test_relocated_reflection_names() -> None:
    """Dotted class names in string constants (looked up by reflection) move too."""
    with zipfile.ZipFile(_jackson("jackson-databind")) as z:
        original = z.read("com/fasterxml/jackson/databind/ext/OptionalHandlerFactory.class")
    pool = parse_constant_pool(JACKSON_RELOCATION.rewrite_class(original))
    dotted = SHADED.replace("/", ".")
    assert dotted + "databind.ser.std.SqlDateSerializer" in pool.utf8.values()
    assert "com.fasterxml.jackson.databind.ser.std.SqlDateSerializer" not in pool.utf8.values()


def test_every_jackson_class_survives_relocation() -> None:
    """Long/Double slots, every constant kind and attributes: all ~1,100 classes parse."""
    count = 0
    for jar in find_jackson_jars():
        with zipfile.ZipFile(jar) as z:
            for name in z.namelist():
                if not name.endswith(".class") or name.endswith("module-info.class"):
                    continue
                data = z.read(name)
                out = JACKSON_RELOCATION.rewrite_class(data)
                before, after = parse_constant_pool(data), parse_constant_pool(out)
                assert after.tags == before.tags, name
                assert out[after.end :] == data[before.end :], name
                parse_class(out)
                count += 1
    assert count > 1000
    with zipfile.ZipFile(_jackson("jackson-core")) as z:
        wide = parse_constant_pool(z.read("com/fasterxml/jackson/core/io/NumberInput.class"))
    assert 5 in wide.tags  # a Long constant (two slots) was walked correctly


# --- the built jar ---------------------------------------------------------------------


def test_shaded_jar_layout(shaded_jar: Path) -> None:
    with zipfile.ZipFile(shaded_jar) as z:
        names = z.namelist()
        manifest = z.read("META-INF/MANIFEST.MF").decode()
        services = {n: z.read(n).decode() for n in names if n.startswith("META-INF/services/")}
        assert z.testzip() is None
    assert names[0] == "META-INF/MANIFEST.MF"
    assert len(names) == len(set(names))
    assert 1000 < len(names) < 1300
    assert not [n for n in names if n.endswith("module-info.class")]
    assert not [n for n in names if n.startswith("META-INF/versions/")]
    assert not [n for n in names if n.startswith("META-INF/maven/")]
    assert "Multi-Release" not in manifest
    classes = [n for n in names if n.endswith(".class")]
    assert all(n.startswith(SHADED) for n in classes)
    assert f"{SHADED}core/JsonFactoryBuilder.class" in names
    assert f"{SHADED}datatype/jsr310/JavaTimeModule.class" in names
    assert set(services) == {
        "META-INF/services/org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonFactory",
        "META-INF/services/org.apache.iceberg.shaded.com.fasterxml.jackson.core.ObjectCodec",
        "META-INF/services/org.apache.iceberg.shaded.com.fasterxml.jackson.databind.Module",
    }
    for body in services.values():
        assert "org.apache.iceberg.shaded.com.fasterxml.jackson." in body
        assert "\ncom.fasterxml" not in "\n" + body
    legal = [n for n in names if n.startswith("META-INF/licenses/")]
    assert "META-INF/licenses/jackson-core-2.15.2/LICENSE" in legal
    assert "META-INF/licenses/jackson-databind-2.15.2/NOTICE" in legal
    assert shaded_jar.name == "iceberg-1.10.2-shaded-jackson-2.15.2-b1.jar"


def test_static_check_passes(runtime_jar: Path, shaded_jar: Path) -> None:
    report = check_references(runtime_jar, [shaded_jar])
    assert report.ok, report.summary()
    assert report.classes >= 80  # 91 with Iceberg 1.10.2
    assert report.members > 100
    assert report.consumer_classes > 100


def test_static_check_reports_missing(runtime_jar: Path, tmp_path: Path) -> None:
    """Without databind the check names the missing classes (the checker really checks)."""
    partial = tmp_path / "partial.jar"
    build_relocated_jar([_jackson("jackson-core"), _jackson("jackson-annotations")], partial)
    report = check_references(runtime_jar, [partial])
    assert not report.ok
    assert f"{SHADED}databind/ObjectMapper" in report.missing_classes
    assert any(m.startswith(f"{SHADED}databind/") for m in report.missing_members)
    assert "missing" in report.summary()


# --- cache, atomicity -----------------------------------------------------------------


def test_cache_dir_follows_xdg(tmp_path: Path) -> None:
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "loch" / "spark"
    assert cache_dir({}) == Path.home() / ".cache" / "loch" / "spark"


def test_cache_is_reused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_env_jars: None, runtime_jar: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = resolve_jars()
    assert first.route == "pypi"
    assert first.jars[0] == runtime_jar
    built = first.jars[1]
    assert built.parent == tmp_path / "loch" / "spark"
    stat = built.stat()

    def no_rebuild(*args: object, **kwargs: object) -> int:
        raise AssertionError("rebuilt although the cached jar is complete")

    monkeypatch.setattr(jars_module, "build_relocated_jar", no_rebuild)
    second = resolve_jars()
    assert second == first
    assert built.stat().st_mtime_ns == stat.st_mtime_ns
    assert built.stat().st_ino == stat.st_ino
    assert first.spark_conf()["spark.jars"] == f"{runtime_jar},{built}"


def test_truncated_cache_entry_is_rebuilt(tmp_path: Path, runtime_jar: Path) -> None:
    dest = ensure_shaded_jackson(runtime_jar, directory=tmp_path)
    good = dest.read_bytes()
    dest.write_bytes(good[: len(good) // 2])
    assert ensure_shaded_jackson(runtime_jar, directory=tmp_path) == dest
    assert dest.read_bytes() == good  # the build is reproducible, byte for byte


_CHILD = """
import sys, time
from pathlib import Path
import loch.spark.jars as j
from loch.spark.relocate import build_relocated_jar
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)
if sys.argv[1] == "raw":
    build_relocated_jar(j.find_jackson_jars(), Path(sys.argv[3]))
else:
    real = j.build_relocated_jar
    def counting(*a, **k):
        print("BUILT", flush=True)
        return real(*a, **k)
    j.build_relocated_jar = counting
    print(j.ensure_shaded_jackson(j.find_runtime_jar(), directory=Path(sys.argv[3])))
"""


def _race(mode: str, target: Path, tmp_path: Path, watch: Path | None = None) -> list[str]:
    """Start two builders at the same moment; while they run, every view of ``watch``
    must be a complete jar."""
    go = tmp_path / f"go-{mode}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, mode, str(go), str(target)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    time.sleep(0.5)  # both children imported and waiting
    go.touch()
    seen = 0
    deadline = time.monotonic() + 120
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if watch is not None and watch.exists():
            try:
                with zipfile.ZipFile(watch) as z:
                    assert "META-INF/MANIFEST.MF" in z.NameToInfo
                    seen += 1
            except FileNotFoundError:
                pass
        time.sleep(0.01)
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outputs.append(out)
    return outputs


def test_concurrent_raw_builds_never_expose_half_a_jar(tmp_path: Path) -> None:
    dest = tmp_path / "out" / "shaded.jar"
    _race("raw", dest, tmp_path, watch=dest)
    with zipfile.ZipFile(dest) as z:
        assert z.testzip() is None
        assert len(z.namelist()) > 1000
    assert [p.name for p in dest.parent.iterdir()] == ["shaded.jar"]  # no temp files left


def test_concurrent_cache_builders_build_once(tmp_path: Path, runtime_jar: Path) -> None:
    directory = tmp_path / "cache"
    outputs = _race("cache", directory, tmp_path)
    assert sum(out.count("BUILT") for out in outputs) == 1
    paths = {out.strip().splitlines()[-1] for out in outputs}
    assert len(paths) == 1
    jar = Path(paths.pop())
    jars = [p.name for p in directory.iterdir() if not p.name.startswith(".")]
    assert jars == [jar.name]
    assert not [p for p in directory.iterdir() if p.name.endswith((".tmp", ".staging"))]
    assert check_references(runtime_jar, [jar]).ok


# --- routes ----------------------------------------------------------------------------


def test_explicit_route_from_argument(tmp_path: Path, no_env_jars: None) -> None:
    a, b = tmp_path / "a.jar", tmp_path / "b.jar"
    a.write_bytes(b"x")
    b.write_bytes(b"y")
    result = resolve_jars([a, str(b)])
    assert result.route == "explicit"
    assert result.jars == (a.resolve(), b.resolve())
    assert result.spark_conf()["spark.jars"] == f"{a.resolve()},{b.resolve()}"
    assert "spark.jars.packages" not in result.spark_conf()


def test_explicit_route_from_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_env_jars: None
) -> None:
    a = tmp_path / "a.jar"
    a.write_bytes(b"x")
    monkeypatch.setenv("LOCH_SPARK_JARS", f" {a} , ")
    assert resolve_jars().jars == (a.resolve(),)
    monkeypatch.setenv("LOCH_SPARK_JARS", f"{a},{tmp_path / 'missing.jar'}")
    with pytest.raises(SparkSetupError, match=r"explicit route.*LOCH_SPARK_JARS.*missing\.jar"):
        resolve_jars()


def test_explicit_argument_beats_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_env_jars: None
) -> None:
    a = tmp_path / "a.jar"
    a.write_bytes(b"x")
    monkeypatch.setenv("LOCH_SPARK_JARS", str(tmp_path / "nope.jar"))
    assert resolve_jars([a]).jars == (a.resolve(),)
    with pytest.raises(SparkSetupError, match="explicit route"):
        resolve_jars([tmp_path / "nope.jar"])


def _hide_iceberg_package(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.files

    def files(name: str) -> object:
        if name == "snowpark-connect-deps-iceberg":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "files", files)


def test_error_when_no_route_works(monkeypatch: pytest.MonkeyPatch, no_env_jars: None) -> None:
    _hide_iceberg_package(monkeypatch)
    with pytest.raises(SparkSetupError) as info:
        resolve_jars()
    message = str(info.value)
    assert isinstance(info.value, LochError)
    assert "explicit route: no jars given" in message
    assert "pypi route: package 'snowpark-connect-deps-iceberg' is not installed" in message
    assert "maven route: not enabled" in message
    assert "LOCH_SPARK_MAVEN" in message


def test_maven_route_when_enabled(monkeypatch: pytest.MonkeyPatch, no_env_jars: None) -> None:
    _hide_iceberg_package(monkeypatch)
    monkeypatch.setenv("LOCH_SPARK_MAVEN", "1")
    result = resolve_jars()
    assert result.route == "maven"
    assert result.jars == ()
    assert result.packages == (
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2",
        "org.projectnessie.nessie-integrations:nessie-spark-extensions-3.5_2.12:0.104.5",
    )
    conf = result.spark_conf()
    assert "spark.jars" not in conf
    assert conf["spark.sql.extensions"].endswith("NessieSparkSessionExtensions")
    assert resolve_jars(allow_maven=True) == result
    with pytest.raises(SparkSetupError):
        resolve_jars(allow_maven=False)


def test_build_that_fails_the_check_is_not_cached(tmp_path: Path, runtime_jar: Path) -> None:
    partial = [_jackson("jackson-core"), _jackson("jackson-annotations")]
    with pytest.raises(SparkSetupError, match=r"pypi route: .* does not satisfy .*missing"):
        ensure_shaded_jackson(runtime_jar, partial, directory=tmp_path)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_missing_jackson_is_reported(tmp_path: Path, runtime_jar: Path) -> None:
    with pytest.raises(SparkSetupError, match="cannot read"):
        ensure_shaded_jackson(
            runtime_jar, [tmp_path / "jackson-core-2.15.2.jar"], directory=tmp_path
        )
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


# --- catalog settings (no JVM) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:19120", "http://127.0.0.1:19120/api/v2"),
        ("http://127.0.0.1:19120/", "http://127.0.0.1:19120/api/v2"),
        ("http://127.0.0.1:19120/api", "http://127.0.0.1:19120/api/v2"),
        ("http://127.0.0.1:19120/api/v2/", "http://127.0.0.1:19120/api/v2"),
        ("http://h/api/v1", "http://h/api/v1"),
    ],
)
def test_nessie_uri(given: str, expected: str) -> None:
    assert nessie_uri(given) == expected


def test_catalog_conf(tmp_path: Path) -> None:
    conf = catalog_conf("nessie_dev", "http://h:1/", "dev", tmp_path, {"cache-enabled": "false"})
    assert conf == {
        "spark.sql.catalog.nessie_dev": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.nessie_dev.catalog-impl": "org.apache.iceberg.nessie.NessieCatalog",
        "spark.sql.catalog.nessie_dev.uri": "http://h:1/api/v2",
        "spark.sql.catalog.nessie_dev.ref": "dev",
        "spark.sql.catalog.nessie_dev.warehouse": tmp_path.resolve().as_uri(),
        "spark.sql.catalog.nessie_dev.cache-enabled": "false",
    }
    assert warehouse_uri("s3://bucket/wh") == "s3://bucket/wh"
    for bad in (
        lambda: catalog_conf("bad-name", "http://h", "main", tmp_path),
        lambda: catalog_conf("c", "ftp://h", "main", tmp_path),
        lambda: catalog_conf("c", "http://h", "", tmp_path),
        lambda: catalog_conf("c", "http://h", "main", ""),
    ):
        with pytest.raises(SparkSetupError):
            bad()


def test_spark_extra_metadata_matches() -> None:
    """The jar route relies on these exact versions (pyproject's spark extra)."""
    assert importlib.metadata.version("pyspark").startswith("3.5.")
    assert importlib.metadata.version("snowpark-connect-deps-iceberg") == "1.0.3"
    assert os.path.basename(find_runtime_jar()) == "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"

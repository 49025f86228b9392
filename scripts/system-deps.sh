#!/usr/bin/env bash
# Installs the Debian packages the test suite needs when they are missing:
# a Java 17 runtime for PySpark (Iceberg's NessieCatalog runs in the JVM) and a
# PostgreSQL server (the tests start throwaway clusters of their own).
# Runs as root (CI) or through sudo; prints what it does, and nothing when all is present.
set -euo pipefail

need=()
if ! java -version 2>&1 | grep -q 'version "17'; then
    if [ ! -x /usr/lib/jvm/java-17-openjdk-amd64/bin/java ] && [ ! -x /usr/lib/jvm/java-17-openjdk-arm64/bin/java ]; then
        need+=(openjdk-17-jre-headless)
    fi
fi

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
    need+=(postgresql)
fi

if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
echo "system-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null

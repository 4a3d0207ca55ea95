#!/usr/bin/env bash
# Runs the Kafka publisher's tansu tests alone against a real Kafka-protocol
# broker (tansu, in-memory storage, on a free port of 127.0.0.1).
#
#   scripts/kafka-real-broker.sh            # uses $OUTBOX_TANSU_BIN, else tansu on PATH
#   scripts/kafka-real-broker.sh --install  # first builds tansu into $TANSU_ROOT
#
# Building tansu takes about 13 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

TANSU_ROOT=${TANSU_ROOT:-/opt/tansu}

if [[ ${1:-} == --install ]]; then
    if [[ ! -x $TANSU_ROOT/bin/tansu ]]; then
        echo "building tansu into $TANSU_ROOT (about 13 minutes on 2 cores)"
        nice -n 19 cargo install tansu --version '^0.6' --locked --features dynostore --root "$TANSU_ROOT"
    fi
    export OUTBOX_TANSU_BIN=$TANSU_ROOT/bin/tansu
fi

if [[ -z ${OUTBOX_TANSU_BIN:-} ]]; then
    if [[ -x $TANSU_ROOT/bin/tansu ]]; then
        export OUTBOX_TANSU_BIN=$TANSU_ROOT/bin/tansu
    elif command -v tansu >/dev/null; then
        OUTBOX_TANSU_BIN=$(command -v tansu)
        export OUTBOX_TANSU_BIN
    else
        echo "no tansu binary: set OUTBOX_TANSU_BIN, or run $0 --install" >&2
        exit 2
    fi
fi

echo "tansu: $OUTBOX_TANSU_BIN"
exec cargo test -p outbox-publishers --features kafka --test conformance_kafka tansu

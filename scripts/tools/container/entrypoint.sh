#!/bin/sh
# The image's entrypoint (see the Dockerfile): the first argument names the role, the rest is
# passed to it. Anything else is run as a command (e.g. `httpbus --help`, `sh`).
set -eu
role="${1:-}"
[ "$#" -gt 0 ] && shift
case "$role" in
    control-plane) exec python -m control_plane "$@" ;;
    producer)      exec python -m producer_api "$@" ;;
    worker)        exec python -m delivery_workers "$@" ;;
    # The outbox relay needs Debezium and a JRE: the outbox image (docker build --target outbox).
    outbox)        exec python -m outbox_relay "$@" ;;
    # spark-submit [options] /opt/httpbus/run_module.py spark [job arguments]; only the Spark
    # image (docker build --target spark) has it.
    audit)
        command -v spark-submit >/dev/null || {
            echo "the audit role needs the Spark image (docker build --target spark)" >&2
            exit 2
        }
        exec spark-submit "$@" ;;
    "" | -h | --help)
        echo "usage: IMAGE control-plane|producer|worker [--config FILE] [--host H] [--port P]"
        echo "       OUTBOX-IMAGE outbox --config FILE"
        echo "       IMAGE audit [spark-submit options] /opt/httpbus/run_module.py MODULE [ARGS]"
        echo "       IMAGE COMMAND [ARGS]"
        exit 0 ;;
    *)             exec "$role" "$@" ;;
esac

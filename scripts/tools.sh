#!/usr/bin/env bash
# The external tools of scripts/tools.list: which are missing, and how to
# install them.
#
#   scripts/tools.sh missing [NAME...]   print the missing names, one a line
#   scripts/tools.sh install [NAME...]   install the missing ones (root, Debian)
#
# Programs come from Debian's packages. Python modules install for the
# python3 the tests run: from Debian's packages when that python3 is
# Debian's own (it sees /usr/lib/python3/dist-packages, and a stock Debian
# python3 refuses pip), with pip otherwise (a pyenv or venv python3 does not
# see apt's packages).
set -euo pipefail
LIST="$(dirname "$0")/tools.list"

entries() {
    grep -vE '^[[:space:]]*(#|$)' "$LIST"
}

# name package module pip: the list's row for NAME.
row() {
    entries | awk -v n="$1" '$1 == n { print; found = 1 } END { exit !found }'
}

found() {
    local name=$1 module=$3
    if [ "$name" = root ]; then
        [ "$(id -u)" = 0 ]
    elif [ -n "$module" ]; then
        python3 -c "import $module" >/dev/null 2>&1
    else
        PATH="$PATH:/usr/sbin:/sbin:/usr/local/sbin" command -v "$name" >/dev/null 2>&1
    fi
}

debian_python() {
    python3 -c 'import sys; sys.exit(0 if sys.base_prefix == "/usr" and any(p.endswith("dist-packages") for p in sys.path) else 1)' 2>/dev/null
}

missing() {
    local names=("$@")
    [ ${#names[@]} -gt 0 ] || mapfile -t names < <(entries | awk '{ print $1 }')
    for n in "${names[@]}"; do
        # shellcheck disable=SC2046
        set -- $(row "$n" || { echo "scripts/tools.list has no $n" >&2; exit 2; })
        found "$1" "${2:-}" "${3:-}" || echo "$1"
    done
}

install() {
    local apt=() pip=() n
    mapfile -t todo < <(missing "$@")
    [ ${#todo[@]} -gt 0 ] || return 0
    for n in "${todo[@]}"; do
        # shellcheck disable=SC2046
        set -- $(row "$n")
        [ "$1" = root ] && continue
        if [ -n "${3:-}" ] && { [ "$2" = - ] || ! debian_python; }; then
            # A module Debian does not package goes in with pip.
            pip+=("$4")
        elif [[ " ${apt[*]} " != *" $2 "* ]]; then
            apt+=("$2")
        fi
    done
    # A stock Debian python3 has no pip: install Debian's before using it.
    if [ ${#pip[@]} -gt 0 ] && ! python3 -m pip --version >/dev/null 2>&1 \
        && debian_python && [[ " ${apt[*]} " != *" python3-pip "* ]]; then
        apt+=(python3-pip)
    fi
    if [ ${#apt[@]} -gt 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt[@]}" >/dev/null
    fi
    if [ ${#pip[@]} -gt 0 ]; then
        local brk=()
        # Debian's own python3 refuses pip without this (PEP 668).
        debian_python && brk=(--break-system-packages)
        python3 -m pip install --quiet --disable-pip-version-check "${brk[@]}" "${pip[@]}"
    fi
}

case "${1:-}" in
missing) shift; missing "$@" ;;
install) shift; install "$@" ;;
*) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac

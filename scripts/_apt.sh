# Sourced by the ci-setup scripts: install the Debian packages that are missing, with one
# `apt-get update` and only when something is missing.
#   apt_ensure LABEL PACKAGE...
apt_ensure() {
    local label="$1"; shift
    local missing=() p sudo=""
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$p")
        fi
    done
    if ((${#missing[@]} == 0)); then
        echo "$label: apt packages present"
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    echo "$label: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

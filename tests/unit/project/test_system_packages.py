"""scripts/system-packages against stand-in apt-get, dpkg-query, sudo and pg_* tools (nothing is installed).

The stand-ins keep their state in files: which packages are installed, whether apt has package
lists, which PostgreSQL clusters are online, and a log of the calls.
"""

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "system-packages"
TOOLS = ["bash", "env", "grep", "awk", "tee", "chmod", "rm", "mktemp", "cat", "touch", "sed", "tail"]

FAKES = {
    "dpkg-query": """
        # dpkg-query -W -f=FORMAT PACKAGE
        for p; do :; done
        grep -qx "$p" "$STATE/installed" 2>/dev/null || exit 1
        printf 'install ok installed'
    """,
    "apt-get": """
        echo "apt-get $* (policy: $(cat "$SYSTEM_PACKAGES_POLICY_RC_D" 2>/dev/null | tail -1))" >> "$STATE/calls"
        case "$1" in
            update) touch "$STATE/lists" ;;
            install)
                if [ ! -e "$STATE/lists" ]; then
                    for p; do case "$p" in -*|install) ;; *) echo "E: Unable to locate package $p" >&2 ;; esac; done
                    exit 100
                fi
                for p; do case "$p" in -*|install) ;; *) echo "$p" >> "$STATE/installed" ;; esac; done
                # Installing postgresql, Debian's postinst starts the default cluster where nothing stops it.
                if [[ " $* " == *" postgresql "* ]]; then
                    echo "15 main 5432 online postgres /var/lib/postgresql/15/main log" > "$STATE/clusters"
                fi ;;
        esac
    """,
    "pg_lsclusters": 'cat "$STATE/clusters" 2>/dev/null || true',
    "pg_ctlcluster": 'echo "pg_ctlcluster $*" >> "$STATE/calls"; sed -i "s/ online / down /" "$STATE/clusters"',
    "sudo": 'echo "sudo $1" >> "$STATE/calls"; exec "$@"',
    "id": 'if [ "$1" = -u ]; then echo "$FAKE_UID"; else exec /usr/bin/id "$@"; fi',
}


@pytest.fixture
def world(tmp_path):
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))

    def run(installed=None, lists=True, uid=0, sudo=True, clusters=""):
        for name, body in FAKES.items():
            if name != "sudo" or sudo:
                (bin_dir / name).write_text("#!/bin/bash\n" + textwrap.dedent(body))
                (bin_dir / name).chmod(0o755)
        if installed is not None:  # None: what an earlier run left
            (state / "installed").write_text("".join(p + "\n" for p in installed))
        if lists:
            (state / "lists").touch()
        if clusters:
            (state / "clusters").write_text(clusters)
        env = {
            "PATH": str(bin_dir),
            "STATE": str(state),
            "FAKE_UID": str(uid),
            "SYSTEM_PACKAGES_POLICY_RC_D": str(tmp_path / "policy-rc.d"),
        }
        result = subprocess.run([str(bin_dir / "bash"), str(SCRIPT)], env=env, capture_output=True, text=True)
        calls = (state / "calls").read_text().splitlines() if (state / "calls").exists() else []
        return result, calls

    run.state, run.policy = state, tmp_path / "policy-rc.d"
    return run


def test_silent_and_untouched_when_everything_is_installed(world):
    result, calls = world(installed=["postgresql", "chromium"], uid=1000, sudo=False)
    assert (result.returncode, result.stdout, result.stderr, calls) == (0, "", "", [])


def test_installs_only_the_missing_package_without_starting_services(world):
    result, calls = world(installed=["postgresql"])
    assert result.returncode == 0, result.stderr
    assert calls == ["apt-get install -y -q --no-install-recommends chromium (policy: exit 101)"]
    assert not world.policy.exists()  # our policy-rc.d is removed afterwards


def test_updates_the_lists_only_when_the_install_cannot_find_the_packages(world):
    result, calls = world(installed=[], lists=False)
    assert result.returncode == 0, result.stderr
    install = "apt-get install -y -q --no-install-recommends postgresql chromium (policy: exit 101)"
    assert calls[:3] == [install, "apt-get update -q (policy: exit 101)", install]
    assert "apt-get update" in result.stderr


def test_a_cluster_the_install_started_is_stopped_and_one_running_before_is_left_alone(world):
    before = "14 old 5433 online postgres /var/lib/postgresql/14/old log\n"
    result, calls = world(installed=["chromium"], clusters=before)
    assert result.returncode == 0, result.stderr
    assert calls[-1] == "pg_ctlcluster 15 main stop"
    assert "pg_ctlcluster 14 old stop" not in calls
    assert "stopping PostgreSQL cluster 15/main" in result.stderr


def test_not_root_uses_sudo(world):
    result, calls = world(installed=["postgresql"], uid=1000)
    assert result.returncode == 0, result.stderr
    assert "sudo env" in calls  # the install ran through sudo
    assert any(c.startswith("apt-get install") for c in calls)


def test_not_root_without_sudo_names_the_packages_and_fails(world):
    result, calls = world(installed=[], uid=1000, sudo=False)
    assert result.returncode != 0
    assert "postgresql chromium" in result.stderr and "apt-get install" in result.stderr
    assert calls == []


def test_a_second_run_is_silent(world):
    world(installed=[])
    result, calls = world()
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert calls.count("pg_ctlcluster 15 main stop") == 1

//! The text after each command's `--help` options: examples, then the exit
//! statuses that command uses (the README's exit-status table has them
//! all).

pub(crate) const MOUNT: &str = "\
Examples:
  zonemount mount mnt                                  # embedded default: rw cache, workspace under ./.sandbox
  zonemount mount --config project.yaml --worker formatter.worker /tmp/task-42
  zonemount mount -q --foreground --prompt mnt          # stay attached, answer asks on this terminal
  zonemount mount --zone work=.:rw --zone docs=../docs /tmp/m  # no file: these zones only (docs ro)
  zonemount mount --preset read-only /tmp/m            # a built-in config (see the README)

A MOUNTPOINT that holds files is refused (exit 2): the mount would hide them
until unmounted. --nonempty mounts over it anyway; the files are untouched.

Exit status: 0 mounted; 1 the mount failed; 2 bad usage or configuration
(file:line named), or a missing, non-empty or mounted MOUNTPOINT; 5 this
machine doesn't allow it (see `zonemount doctor`).";

pub(crate) const UNMOUNT: &str = "\
Examples:
  zonemount unmount /tmp/task-42
  zonemount unmount --lazy /tmp/task-42                # busy: detach now, go when unused
  zonemount unmount --stale                            # every mount whose daemon is gone

Exit status: 0 unmounted (or nothing mounted on that directory: a note); 1 busy
without --lazy, or the unmount failed; 2 bad usage, a path that does not
exist, or a mount that is not a zonemount mount.";

pub(crate) const LIST: &str = "\
Examples:
  zonemount list
  zonemount list --json | jq '.[] | select(.stale)'

Exit status: 0; 2 bad usage.";

pub(crate) const DERIVE: &str = "\
Examples:
  zonemount derive                                     # ./zonemount.yaml, else the embedded default
  zonemount derive --config project.yaml --worker parent.worker --worker child.worker
  zonemount derive --json --config project.yaml
  zonemount derive --config project.yaml --zone docs=../docs:ro  # the file's zones plus docs

Exit status: 0; 2 bad usage or configuration (file:line named).";

pub(crate) const STATUS: &str = "\
Examples:
  zonemount status /tmp/task-42
  zonemount status --json /tmp/task-42

Exit status: 0; 1 the daemon can't be reached; 2 bad usage.";

pub(crate) const APPROVALS: &str = "\
Examples:
  zonemount approvals list /tmp/task-42
  zonemount approvals list                       # every live mount of yours, each named
  zonemount approvals allow 7                    # the one mount where request 7 waits
  zonemount approvals watch --json /tmp/task-42
  zonemount approvals allow --scope path /tmp/task-42 7
  zonemount approvals deny /tmp/task-42 8

Exit status: 0; 1 the daemon can't be reached, or ID is not pending; 2 bad
usage, or (without MOUNTPOINT) ID is pending on several mounts.";

pub(crate) const CHECK: &str = "\
Examples:
  zonemount check /tmp/task-42 /tmp/task-42/data/a.txt --write
  zonemount check --json /tmp/task-42 /workspace/notes.md --delete

Exit status: 0 allowed; 3 would ask; 4 refused; 1 MOUNTPOINT is not a
zonemount mount, or its config can't be loaded again; 2 bad usage, or PATH
outside the mount.";

pub(crate) const DOCTOR: &str = "\
Examples:
  zonemount doctor
  zonemount doctor --json | jq '.checks[] | select(.state != \"ok\")'

Exit status: 0 a mount can be made here; 5 it can't (the missing lines say why).";

pub(crate) const COMPLETIONS: &str = "\
Examples:
  zonemount completions bash > /etc/bash_completion.d/zonemount
  zonemount completions zsh > \"${fpath[1]}/_zonemount\"
  zonemount completions fish > ~/.config/fish/completions/zonemount.fish

Exit status: 0; 2 an unknown shell.";

pub(crate) const MAN: &str = "\
Examples:
  zonemount man | man -l -
  zonemount man --dir pages && man -l pages/zonemount.yaml.5   # the config format

Exit status: 0; 1 the pages can't be written.";

pub(crate) const CHANGES: &str = "\
Examples:
  zonemount changes /tmp/task-42                       # what the worker changed, not yet on the host
  zonemount changes --diff /tmp/task-42 /work/src      # with unified diffs, under /work/src only
  zonemount changes --patch /tmp/task-42 > task.patch  # for `git apply` in a copy of the backing dir
  zonemount changes --json ~/.local/state/zonemount/stages/tmp-task-42-1a2b3c4d

Exit status: 0; 1 the daemon can't be reached, or the stage can't be read;
2 bad usage, no staged zone there, or --patch over several staged zones
(name one).";

pub(crate) const COMMIT: &str = "\
Examples:
  zonemount commit /tmp/task-42                        # apply everything staged to the backing dirs
  zonemount commit /tmp/task-42 /work/src/main.rs      # only this path
  zonemount commit --force /tmp/task-42                # overwrite what the host changed meanwhile

Exit status: 0 everything applied; 6 some paths not applied (the host
changed them meanwhile, or a worker still has files open for writing): they
stay staged; 1 the commit failed (run it again: it completes); 2 bad usage.";

pub(crate) const CHECKPOINT: &str = "\
Examples:
  zonemount checkpoint /tmp/task-42                    # every staged zone; prints the id
  zonemount checkpoint --label 'before npm install' /tmp/task-42/work

Files open for writing are taken as they are at that instant. Past 32
checkpoints of a zone the two oldest are merged (the oldest is dropped).

Exit status: 0; 1 the daemon can't be reached, or the checkpoint failed
(nothing was recorded); 2 bad usage, or no staged zone there.";

pub(crate) const CHECKPOINTS: &str = "\
Examples:
  zonemount checkpoints /tmp/task-42
  zonemount checkpoints --json ~/.local/state/zonemount/stages/tmp-task-42-1a2b3c4d

Exit status: 0; 1 the daemon can't be reached, or the stage can't be read;
2 bad usage, or no staged zone there.";

pub(crate) const REWIND: &str = "\
Examples:
  zonemount rewind /tmp/task-42 3                      # every zone as at checkpoint 3
  zonemount rewind /tmp/task-42 3 /work/src/main.rs    # only this path; the rest stays

A whole-zone rewind drops the checkpoints after ID and every change since.

Exit status: 0; 6 a zone was left alone (a worker has files of it open for
writing); 1 the rewind failed (run it again: it completes); 2 bad usage.";

pub(crate) const DISCARD: &str = "\
Examples:
  zonemount discard /tmp/task-42                       # drop every staged change
  zonemount discard /tmp/task-42 /work/build           # only under /work/build

Exit status: 0; 6 a zone was left alone (a worker still has files of it
open for writing); 1 the discard failed; 2 bad usage.";

pub(crate) const REVIEW: &str = "\
Keys, for each file or directory (its summary line shown first):
  c commit it   d discard it   k keep it staged   v view its diff ($PAGER on a terminal)
  o decide a directory's changes one by one   C commit the rest   D discard the rest
  K or q keep the rest   r rewind to a checkpoint (when there are some)   ? help
Each decision is applied at once, as `commit TARGET PATH` or `discard TARGET PATH`
would (the worker's side may not decide); a summary ends the walk. With stdin not a
terminal nothing is decided: the changes and the commands to finish are printed.

Examples:
  zonemount review /tmp/task-42                        # walk a live mount's stage
  zonemount review ~/.local/state/zonemount/stages/ID  # a stage dir no mount holds

Exit status: 0; 6 a commit left conflicts (they stay staged); 1 an operation failed
or was refused; 2 bad usage.";

pub(crate) const APPROVALS_LIST: &str = "\
Examples:
  zonemount approvals list /tmp/task-42
  zonemount approvals list --json /tmp/task-42 | jq '.[] | select(.class == \"read\")'
  zonemount approvals list                 # every live mount of yours with requests, each named

Exit status: 0; 1 the daemon can't be reached; 2 bad usage.";

pub(crate) const APPROVALS_WATCH: &str = "\
Examples:
  zonemount approvals watch /tmp/task-42              # one line per request and outcome
  zonemount approvals watch --json /tmp/task-42       # the protocol's event objects

Exit status: 0 the mount went away; 1 the daemon can't be reached; 2 bad usage.";

pub(crate) const APPROVALS_ALLOW: &str = "\
Examples:
  zonemount approvals allow /tmp/task-42 7                  # this request only
  zonemount approvals allow --scope path /tmp/task-42 7     # this class on this path from now on
  zonemount approvals allow --scope zone /tmp/task-42 7     # this class anywhere in the zone
  zonemount approvals allow 7                               # on the one live mount where 7 waits

Exit status: 0 allowed; 1 not pending (decided, timed out, withdrawn), the
daemon can't be reached, or asked from the worker's own side (its session,
or inside its `zonemount run`: decide from another terminal); 2 bad usage,
or (without MOUNTPOINT) ID is pending on several mounts: the command for
each is printed.";

pub(crate) const APPROVALS_DENY: &str = "\
Examples:
  zonemount approvals deny /tmp/task-42 7
  zonemount approvals deny 7                 # on the one live mount where 7 waits

Exit status: 0 denied; 1 not pending, the daemon can't be reached, or asked
from the worker's own side; 2 bad usage, or (without MOUNTPOINT) ID is
pending on several mounts.";

pub(crate) const STAGES: &str = "\
Examples:
  zonemount stages                                     # every stage dir under the state dir
  zonemount stages --json | jq '.[] | select(.changes == 0)'
  zonemount stages --prune                             # remove the unused ones that keep nothing
  zonemount stages /srv/stages                         # stage dirs given as --stage-dir /srv/stages/NAME

--prune never removes a stage dir a mount holds, nor one that keeps changes:
commit or discard them first (zonemount discard STAGE_DIR).

Exit status: 0; 1 a stage dir could not be removed, or DIR could not be
read; 2 bad usage.";

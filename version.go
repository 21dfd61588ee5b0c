package handoff

// Version is the version of this module that the build carries: the
// runtime exports it as handoff_build_info{version}, logs it at start,
// and `handoff version` prints it. A release changes it in one commit,
// with a CHANGELOG.md entry that says what the release means for a
// running service (state file format, flags, metrics); that commit is
// where the version starts, so the commit before it is the last of the
// previous version.
const Version = "0.2.0"

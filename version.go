package handoff

// Version is the version of this module that the build carries: the
// runtime exports it as handoff_build_info{version}, logs it at start,
// and `handoff version` prints it. A release changes it in one commit,
// whose tree is the release: that commit also turns CHANGELOG.md's
// Unreleased entry into the release's (what the release means for a
// running service: state file format, flags, endpoints, metrics,
// defaults) and writes into the entry of the release before it the
// commit that release shipped ("Last commit: HASH."). Work toward the
// next release goes under a new Unreleased entry and keeps this value.
// examples/rental's rollback tests build the previous version from git
// by these rules: the commit the entry below names while the tree is a
// release, the release commit itself once Unreleased is back on top.
const Version = "0.3.0"

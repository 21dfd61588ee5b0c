package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// Environment variables that hold the admin tokens when no flag gives
// them: the command line is visible to every user of the host (ps).
const (
	envAdminToken     = "HANDOFF_ADMIN_TOKEN"
	envAdminReadToken = "HANDOFF_ADMIN_READ_TOKEN"
)

// opsFlags are the operating flags besides the admin address: the probe
// listener, the admin tokens from files or the environment, and class
// renames.
type opsFlags struct {
	probes             string
	adminTokenFile     string
	adminReadTokenFile string
	renames            renameFlag
}

func (o *opsFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&o.probes, "probes", "", "serve /livez, /healthz, /readyz and /metrics alone (no messages, no token) on `ADDR` (host:port; no host means 127.0.0.1; 0.0.0.0:PORT for the kubelet and Prometheus); off when empty")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "`FILE` holding the admin token (instead of -admin-token; else $"+envAdminToken+")")
	fs.StringVar(&o.adminReadTokenFile, "admin-read-token-file", "", "`FILE` holding the token the admin endpoints that show messages require (else $"+envAdminReadToken+"); none means reading needs no token")
	fs.Var(&o.renames, "rename-class", "give the saved messages of class OLD to class NEW (`OLD=NEW`, a renamed class) instead of making them dead letters; repeatable")
}

// tokens resolves the admin tokens: the admin token from -admin-token,
// else -admin-token-file, else the environment; the read token from its
// file, else the environment. A file's trailing newline is dropped.
func (o *opsFlags) tokens(flagToken string, lookupEnv func(string) (string, bool)) (token, read string, err error) {
	if flagToken != "" && o.adminTokenFile != "" {
		return "", "", fmt.Errorf("-admin-token and -admin-token-file are both set: give one")
	}
	fromFile := func(name, path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		t := strings.TrimRight(string(b), "\r\n")
		if t == "" {
			return "", fmt.Errorf("%s: %s is empty", name, path)
		}
		return t, nil
	}
	switch {
	case flagToken != "":
		token = flagToken
	case o.adminTokenFile != "":
		if token, err = fromFile("-admin-token-file", o.adminTokenFile); err != nil {
			return "", "", err
		}
	default:
		token, _ = lookupEnv(envAdminToken)
	}
	if o.adminReadTokenFile != "" {
		if read, err = fromFile("-admin-read-token-file", o.adminReadTokenFile); err != nil {
			return "", "", err
		}
	} else {
		read, _ = lookupEnv(envAdminReadToken)
	}
	return token, read, nil
}

// renameFlag is the repeatable -rename-class OLD=NEW.
type renameFlag map[string]string

func (f *renameFlag) String() string {
	var parts []string
	for k, v := range *f {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (f *renameFlag) Set(s string) error {
	from, to, ok := strings.Cut(s, "=")
	if !ok || from == "" || to == "" {
		return fmt.Errorf("want OLD=NEW, got %q", s)
	}
	if *f == nil {
		*f = map[string]string{}
	}
	if prev, dup := (*f)[from]; dup && prev != to {
		return fmt.Errorf("class %q is renamed twice (%q and %q)", from, prev, to)
	}
	(*f)[from] = to
	return nil
}

package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// The config file holds a user's connection and identity, so that they need
// not be repeated on every command line. It is lines of `key = value`;
// blank lines and lines starting with # are ignored; a value may be quoted
// ("…"). The keys are the flags they stand for:
//
//	# ~/.config/mrmarket/config
//	nats      = tls://market.example.org:4222
//	user      = alice
//	creds     = ~/mrmarket/creds
//	tls-ca    = ~/mrmarket/ca.pem
//	admin-key = UD3…   (or a file holding it)
//
// (tls_ca and admin_key may be written with an underscore). A relative path
// is relative to the file's directory; ~/ is the home directory. The file is
// --config, else MRM_CONFIG, else $XDG_CONFIG_HOME/mrmarket/config
// (~/.config/mrmarket/config) when it exists. A setting is taken from the
// command line first, then the environment (MRM_NATS_URL, MRM_USER,
// MRM_CREDS, MRM_TLS_CA, MRM_ADMIN_KEY), then the config file, then the
// default. The daemons (up, agent, broker, bank serve) read flags and the
// environment only: a user's file does not configure a service.

// settingDef is one setting: its environment variable and default.
type settingDef struct{ env, def string }

var settings = map[string]settingDef{
	"nats":      {"MRM_NATS_URL", DefaultNATSURL},
	"user":      {"MRM_USER", ""},
	"creds":     {"MRM_CREDS", DefaultCreds},
	"tls-ca":    {"MRM_TLS_CA", ""},
	"admin-key": {"MRM_ADMIN_KEY", ""},
}

// daemonCommands ignore the config file.
var daemonCommands = map[string]bool{"up": true, "agent": true, "broker": true, "bank serve": true, "demo": true}

// configKey is the metadata key of the loaded config file.
const configKey = "config"

func flagConfig() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "config", Usage: "the config file: connection and identity as `key = value` lines (default ~/.config/mrmarket/config)", EnvVars: []string{"MRM_CONFIG"}}
}

// setting is a connection or identity setting (a key of settings) as the
// command sees it: its flag (or the flag's environment variable), else the
// environment, else the config file, else the default. A command without
// a --user flag acts for no user, whatever the environment or file say.
func setting(c *ucli.Context, name string) string {
	def := settings[name]
	if v := c.String(name); v != "" && c.IsSet(name) {
		return v // an empty environment variable counts as unset
	}
	if name == "user" && !hasFlag(c, name) {
		return ""
	}
	if v := os.Getenv(def.env); v != "" {
		return v
	}
	if cfg, ok := c.App.Metadata[configKey].(map[string]string); ok && !daemonCommands[commandPath(c)] {
		if v, ok := cfg[name]; ok {
			return v
		}
	}
	return def.def
}

// hasFlag reports whether c's command (or the app) defines the flag.
func hasFlag(c *ucli.Context, name string) bool {
	for _, l := range c.Lineage() {
		if l.Command != nil {
			for _, f := range l.Command.Flags {
				if slices.Contains(f.Names(), name) {
					return true
				}
			}
		}
	}
	return false
}

// loadConfig reads the config file into the app's metadata: the one named
// by --config (MRM_CONFIG), which must exist, or the default one if it
// exists.
func loadConfig(c *ucli.Context) error {
	path := c.String("config")
	if path == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return nil // no home: no default file
		}
		path = filepath.Join(dir, "mrmarket", "config")
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	cfg, err := readConfig(path)
	if err != nil {
		return usageError{err}
	}
	if c.App.Metadata == nil {
		c.App.Metadata = map[string]any{}
	}
	c.App.Metadata[configKey] = cfg
	return nil
}

// readConfig parses a config file (see above).
func readConfig(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	cfg := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		key, value = strings.ReplaceAll(strings.TrimSpace(key), "_", "-"), strings.TrimSpace(value)
		if !ok || key == "" {
			return nil, fmt.Errorf("config file %s:%d: want `key = value`, got %q", path, n, line)
		}
		if _, known := settings[key]; !known {
			return nil, fmt.Errorf("config file %s:%d: unknown key %q (known: nats, user, creds, tls-ca, admin-key)", path, n, key)
		}
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		if value == "" {
			return nil, fmt.Errorf("config file %s:%d: %s has no value", path, n, key)
		}
		switch key {
		case "creds", "tls-ca":
			value = configPath(path, value)
		case "admin-key":
			if wire.CheckPublicKey(value) != nil {
				value = configPath(path, value)
			}
		case "user":
			if err := wire.CheckName("user", value); err != nil {
				return nil, fmt.Errorf("config file %s:%d: %w", path, n, err)
			}
		}
		cfg[key] = value
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

// configPath resolves a path written in the config file at file: ~/ is
// the home directory, a relative path is relative to the file's directory.
func configPath(file, p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(file), p)
}

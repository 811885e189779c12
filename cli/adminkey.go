package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// flagAdminKey is the trust anchor: the admin's public key, or a file
// holding it; default <creds>/admin.pub (`mrmarket up` writes it).
func flagAdminKey() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "admin-key", Usage: "the admin's public key (U…) or a file holding it: the trust anchor of principal records (default: <creds>/admin.pub)",
		EnvVars: []string{"MRM_ADMIN_KEY"}}
}

// adminKey is the anchor given by --admin-key, else the credentials
// directory's (admin.pub, else admin.nk's public key). A daemon cannot run
// without one: it could not tell a real principal from a forged answer.
func adminKey(c *ucli.Context) (string, error) {
	if v := c.String("admin-key"); v != "" {
		if wire.CheckPublicKey(v) == nil {
			return v, nil
		}
		k, err := signing.AdminKeyFile(v)
		if err != nil {
			return "", usageError{fmt.Errorf("--admin-key: %w", err)}
		}
		return k, nil
	}
	k, err := signing.CredsDir(c.String("creds")).AdminKey()
	if err != nil {
		return "", err
	}
	if k == "" {
		return "", usageError{fmt.Errorf("no admin key: pass --admin-key (or MRM_ADMIN_KEY) or put admin.pub in --creds %s (`mrmarket up` writes it)", c.String("creds"))}
	}
	return k, nil
}

// clientAdminKey is the anchor a command checks answers against:
// --admin-key where the command has it, else MRM_ADMIN_KEY, else the
// config file's, else the credentials directory's; "" (answers taken
// unchecked, as before identities) when none is known.
func clientAdminKey(c *ucli.Context) string {
	if v := setting(c, "admin-key"); v != "" {
		if wire.CheckPublicKey(v) == nil {
			return v
		}
		if k, err := signing.AdminKeyFile(v); err == nil {
			return k
		}
		return v // not a key: every answer is refused, and the error says so
	}
	k, _ := credsDir(c).AdminKey()
	return k
}

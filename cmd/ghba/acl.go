package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// The ACL commands: acl bootstrap, login, logout, user, token, whoami
// (docs/design.md, "Security").

// aclHelp is the part of the help texts that says what ACLs do.
const aclHelp = `With ACLs on (every node's config: acl.enabled: true, and the same
acl.server_token, from ghba keygen, for the nodes' own requests), every
request needs a token: --token, else $GHBA_TOKEN, else the one "ghba login"
saved. Without one the CLI exits with code 7 (unless acl.default_policy is
allow: then it runs as the user nobody). The owner of a new file or
directory comes from the token (its user's uid and primary gid), never from
--uid and --gid; only the owner or root (uid 0) may chmod, only root may
chown (the owner may change the group to one of its own groups); a refusal
exits with code 6. Joining, leaving, the keyring and the administration of
users and tokens need a token with the management role.`

// maxPasswordLine bounds what --password-stdin reads.
const maxPasswordLine = 4096

// newACLCmds returns the ACL commands: acl (bootstrap), login, logout,
// user, token and whoami.
func newACLCmds(o *clientOptions) []*cobra.Command {
	return []*cobra.Command{newACLCmd(o), newLoginCmd(o), newLogoutCmd(), newUserCmd(o), newTokenCmd(o), newWhoAmICmd(o)}
}

// aclError prefixes err with "op: " unless the server's message already
// starts with it (the nodes' ACL errors usually do).
func aclError(op string, err error) error {
	if strings.HasPrefix(err.Error(), op+":") {
		return err
	}
	return fmt.Errorf("%s: %w", op, err)
}

// readPassword reads a password from in: the first line, without its line
// ending. An empty password is a usage error.
func readPassword(in io.Reader, op string) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(in, maxPasswordLine)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("%s: reading the password from stdin: %w", op, err)
	}
	line = strings.TrimSuffix(line, "\n")
	line = strings.TrimSuffix(line, "\r")
	if line == "" {
		return "", usageErrorf("%s: --password-stdin: stdin gave an empty password (write it on the first line)", op)
	}
	return line, nil
}

// checkUserName rejects a user name the cluster would refuse, before any
// RPC.
func checkUserName(op, name string) error {
	if err := acl.ValidName(name); err != nil {
		return usageErrorf("%s: %v", op, err)
	}
	return nil
}

// newACLCmd returns "ghba acl" with its subcommand "bootstrap".
func newACLCmd(o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Set up the access control of a cluster (ghba acl bootstrap)",
		Long: `Set up access control lists (ACLs): "ghba acl bootstrap" hands out the
cluster's first management token; users ("ghba user"), logins ("ghba
login") and tokens ("ghba token") follow from it.

` + aclHelp,
		Example: `  ghba acl bootstrap > root.token && chmod 600 root.token
  GHBA_TOKEN=$(cat root.token) ghba user list`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newACLBootstrapCmd(o))
	return cmd
}

// newACLBootstrapCmd returns "ghba acl bootstrap".
func newACLBootstrapCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "bootstrap",
		Short: "Create the cluster's first management token (once per cluster)",
		Long: `Create the user root (uid 0, management role) and its first token, and print
the token's secret: only the secret and a newline, so that a script can
capture it. The token never expires and can do anything: store it safely
(a file of mode 0600, a secret store), use it to add users ("ghba user
add") and revoke it ("ghba token revoke") when they exist, or keep it for
emergencies. Run it once per cluster, after the nodes have formed it: a
second bootstrap fails with exit code 4 (already exists), and the secret
cannot be shown again. With --json: the whole answer {token, accessor,
user}.

` + aclHelp,
		Example: `  ghba acl bootstrap > root.token && chmod 600 root.token
  export GHBA_TOKEN=$(ghba --addr 10.0.0.1:7400 acl bootstrap)
  ghba acl bootstrap --json | jq -r .accessor`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.ACLBootstrap(ctx)
				if err != nil {
					return aclError("acl bootstrap", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), r.Token)
				return err
			})
		},
	}
}

// newLoginCmd returns "ghba login".
func newLoginCmd(o *clientOptions) *cobra.Command {
	var (
		user     string
		pwdStdin bool
	)
	cmd := &cobra.Command{
		Use:   "login --user NAME --password-stdin",
		Short: "Exchange a user's password for a token and save it for the next commands",
		Long: `Log in as --user with the password read from stdin (its first line, without
the line ending; a password is never taken as an argument, where ps and the
shell's history would show it). The node hands out a token that lasts
acl.token_ttl (default 24h); it is saved in the user's configuration
directory (ghba/token under $XDG_CONFIG_HOME or ~/.config, directory mode
0700, file mode 0600) and the next commands present it unless --token or
$GHBA_TOKEN give another. Prints nothing on success. A wrong user name or
password exits with code 7; after 3 failures in a row a node makes the
user wait before it checks the next password (1s, doubling with each
failure, up to a minute).

` + aclHelp,
		Example: `  echo "$ALICE_PASSWORD" | ghba login --user alice --password-stdin
  ghba login --user alice --password-stdin < ~/.ghba-password && ghba whoami`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user == "" {
				return usageErrorf("login: --user: no user name given")
			}
			if !pwdStdin {
				return usageErrorf("login: give --password-stdin and the password on stdin (a password is never taken as an argument)")
			}
			if err := checkUserName("login", user); err != nil {
				return err
			}
			password, err := readPassword(cmd.InOrStdin(), "login")
			if err != nil {
				return err
			}
			path, err := tokenFile()
			if err != nil {
				return fmt.Errorf("login: %w", err)
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.ACLLogin(ctx, user, password)
				if err != nil {
					return aclError("login", err)
				}
				if err := saveToken(path, r.Token); err != nil {
					return fmt.Errorf("login: saving the token: %w", err)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&user, "user", "", "user name (required)")
	f.BoolVar(&pwdStdin, "password-stdin", false, "read the password from stdin (required)")
	return cmd
}

// saveToken writes token to path atomically with mode 0600 (a temporary
// file in the same directory renamed over it), creating the directory
// with mode 0700.
func saveToken(path, token string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".token-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a failure; a no-op after the rename
	// CreateTemp makes the file 0600 already; the chmod keeps it so
	// whatever the platform does, before the secret is written.
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.WriteString(token + "\n")
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

// newLogoutCmd returns "ghba logout".
func newLogoutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Forget the token ghba login saved",
		Long: `Remove the token "ghba login" saved (ghba/token in the user's configuration
directory). Prints nothing; no error if there is none. The token itself
stays valid until it expires: a user with the management role can revoke it
earlier ("ghba token revoke"). $GHBA_TOKEN and --token are not affected.`,
		Example: `  ghba logout`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := tokenFile()
			if err != nil {
				return fmt.Errorf("logout: %w", err)
			}
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("logout: %w", err)
			}
			return nil
		},
	}
}

// newUserCmd returns "ghba user" with its subcommands add, list, passwd
// and rm.
func newUserCmd(o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Add, list, change and remove the users of the cluster's ACLs",
		Long: `Manage the users of a cluster with ACLs: each has a name, a uid, a primary
gid, supplementary groups, a password (kept as a bcrypt hash) and possibly
the management role. Every subcommand needs a token with the management
role (exit code 6 otherwise).

` + aclHelp,
		Example: `  echo "$PW" | ghba user add alice --uid 1000 --gid 1000 --groups 100,200 --password-stdin
  ghba user list
  echo "$NEWPW" | ghba user passwd alice --password-stdin
  ghba user rm alice`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newUserAddCmd(o), newUserListCmd(o), newUserPasswdCmd(o), newUserRmCmd(o))
	return cmd
}

// parseGroups parses a comma-separated list of numeric group ids.
func parseGroups(s string) ([]uint32, error) {
	var out []uint32
	for g := range strings.SplitSeq(s, ",") {
		g = strings.TrimSpace(g)
		if g == "" {
			continue
		}
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, usageErrorf("--groups %q: want numeric group ids separated by commas (e.g. 100,200)", s)
		}
		out = append(out, uint32(n))
	}
	return out, nil
}

// printUser prints a user as a two-column table.
func printUser(w io.Writer, u *rpc.ACLUser) error {
	t := newTable(w)
	t.row("name", u.Name)
	t.row("uid", u.UID)
	t.row("gid", u.GID)
	t.row("groups", formatGroups(u.Groups))
	t.row("management", yesNo(u.Management))
	return t.flush()
}

// formatGroups prints group ids comma-separated ("-" for none).
func formatGroups(gs []uint32) string {
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = strconv.FormatUint(uint64(g), 10)
	}
	return dash(strings.Join(s, ","))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// newUserAddCmd returns "ghba user add".
func newUserAddCmd(o *clientOptions) *cobra.Command {
	var (
		uid, gid   uint32
		groups     string
		management bool
		pwdStdin   bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME --uid N --gid N [--groups G1,G2] [--management] [--password-stdin]",
		Short: "Add a user",
		Long: `Add the user NAME (1 to 64 of a-z A-Z 0-9 . _ -, not starting with . or -)
with the uid --uid, the primary group --gid and the supplementary groups
--groups. --management gives its tokens the management role. With
--password-stdin the password (at least 8 characters) is read from the
first line of stdin; without it the user cannot log in until "ghba user
passwd" sets one. A user that exists already exits with code 4. Prints the
user; with --json {user: {name, uid, gid, groups, management}}.

Several users may share a uid; a uid of 0 makes a user root for every
permission check.`,
		Example: `  echo "$PW" | ghba user add alice --uid 1000 --gid 1000 --password-stdin
  ghba user add ops --uid 2000 --gid 2000 --groups 10,20 --management --password-stdin < ops.password
  ghba user add batch --uid 3000 --gid 3000`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkUserName("user add", name); err != nil {
				return err
			}
			for _, f := range []string{"uid", "gid"} {
				if !cmd.Flags().Changed(f) {
					return usageErrorf("user add: --%s is required", f)
				}
			}
			gs, err := parseGroups(groups)
			if err != nil {
				return err
			}
			req := &rpc.ACLUserRequest{ACLUser: rpc.ACLUser{Name: name, UID: uid, GID: gid, Groups: gs, Management: management}}
			if pwdStdin {
				if req.Password, err = readPassword(cmd.InOrStdin(), "user add"); err != nil {
					return err
				}
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.ACLUser(ctx, rpc.MethodACLUserAdd, req)
				if err != nil {
					return aclError("user add", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				return printUser(cmd.OutOrStdout(), &r.User)
			})
		},
	}
	f := cmd.Flags()
	f.Uint32Var(&uid, "uid", 0, "user id (required)")
	f.Uint32Var(&gid, "gid", 0, "primary group id (required)")
	f.StringVar(&groups, "groups", "", "supplementary group ids, comma-separated")
	f.BoolVar(&management, "management", false, "give the user's tokens the management role")
	f.BoolVar(&pwdStdin, "password-stdin", false, "read the password from the first line of stdin")
	return cmd
}

// newUserListCmd returns "ghba user list".
func newUserListCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the users",
		Long: `List the users by name: NAME UID GID GROUPS MANAGEMENT. With --json: an
array of {name, uid, gid, groups, management} objects. Passwords are never
shown.`,
		Example: `  ghba user list
  ghba user list --json | jq -r '.[] | select(.management) | .name'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.ACLUsers(ctx)
				if err != nil {
					return aclError("user list", err)
				}
				users := r.Users
				if users == nil {
					users = []rpc.ACLUser{}
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), users)
				}
				t := newTable(cmd.OutOrStdout(), "NAME", "UID", "GID", "GROUPS", "MANAGEMENT")
				for _, u := range users {
					t.row(u.Name, u.UID, u.GID, formatGroups(u.Groups), yesNo(u.Management))
				}
				return t.flush()
			})
		},
	}
}

// newUserPasswdCmd returns "ghba user passwd".
func newUserPasswdCmd(o *clientOptions) *cobra.Command {
	var pwdStdin bool
	cmd := &cobra.Command{
		Use:   "passwd NAME --password-stdin",
		Short: "Set a user's password",
		Long: `Set the password of the user NAME to the first line of stdin (at least 8
characters; never taken as an argument). The user's tokens stay valid:
revoke them with "ghba token revoke" if the old password leaked. Prints a
confirmation; with --json {user: {...}}.`,
		Example: `  echo "$NEWPW" | ghba user passwd alice --password-stdin`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkUserName("user passwd", name); err != nil {
				return err
			}
			if !pwdStdin {
				return usageErrorf("user passwd: give --password-stdin and the password on stdin (a password is never taken as an argument)")
			}
			password, err := readPassword(cmd.InOrStdin(), "user passwd")
			if err != nil {
				return err
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.ACLUser(ctx, rpc.MethodACLUserPasswd, &rpc.ACLUserRequest{ACLUser: rpc.ACLUser{Name: name}, Password: password})
				if err != nil {
					return aclError("user passwd", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "password of %s set\n", r.User.Name)
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&pwdStdin, "password-stdin", false, "read the password from the first line of stdin (required)")
	return cmd
}

// newUserRmCmd returns "ghba user rm".
func newUserRmCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a user and revoke its tokens",
		Long: `Remove the user NAME and revoke every token it has; prints how many were
revoked. A node may accept a revoked token for up to a second more (each
node caches what it read of a token that long). A user that does not exist
exits with code 3. With --json {user: {...}, revoked}.`,
		Example: `  ghba user rm alice`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkUserName("user rm", name); err != nil {
				return err
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.ACLUser(ctx, rpc.MethodACLUserRemove, &rpc.ACLUserRequest{ACLUser: rpc.ACLUser{Name: name}})
				if err != nil {
					return aclError("user rm", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), struct {
						User    rpc.ACLUser `json:"user"`
						Revoked int         `json:"revoked"`
					}{r.User, r.Revoked})
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed user %s; revoked %d token(s)\n", r.User.Name, r.Revoked)
				return err
			})
		},
	}
}

// newTokenCmd returns "ghba token" with its subcommands list and revoke.
func newTokenCmd(o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "List and revoke the cluster's ACL tokens",
		Long: `List and revoke the tokens of a cluster with ACLs. A token is named by its
accessor (the first 12 hex digits of its secret's SHA-256), which lists
show; its secret is shown once, by the login or bootstrap that made it, and
the cluster keeps only its hash. Both subcommands need a token with the
management role (exit code 6 otherwise).`,
		Example: `  ghba token list
  ghba token revoke 3f2a9c01b7de`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTokenListCmd(o), newTokenRevokeCmd(o))
	return cmd
}

// formatTokenTime prints Unix nanoseconds as local RFC 3339 time (to the
// second), or none for 0.
func formatTokenTime(ns int64, none string) string {
	if ns == 0 {
		return none
	}
	return time.Unix(0, ns).Format(time.RFC3339)
}

// newTokenListCmd returns "ghba token list".
func newTokenListCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the tokens, oldest first",
		Long: `List the tokens, oldest first: ACCESSOR USER MANAGEMENT DESCRIPTION CREATED
EXPIRES ("never" for a token without expiry, "(expired)" after the time of
one that has expired; an expired token is refused, and stays listed until
it is revoked). Secrets are never shown. With --json: an array of
{accessor, user, management, description, created, expires, expired}
objects (times in Unix nanoseconds).`,
		Example: `  ghba token list
  ghba token list --json | jq -r '.[] | select(.user == "alice") | .accessor'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.ACLTokens(ctx)
				if err != nil {
					return aclError("token list", err)
				}
				tokens := r.Tokens
				if tokens == nil {
					tokens = []rpc.ACLTokenInfo{}
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), tokens)
				}
				t := newTable(cmd.OutOrStdout(), "ACCESSOR", "USER", "MANAGEMENT", "DESCRIPTION", "CREATED", "EXPIRES")
				for _, tk := range tokens {
					exp := formatTokenTime(tk.Expires, "never")
					if tk.Expired {
						exp += " (expired)"
					}
					t.row(tk.Accessor, dash(tk.User), yesNo(tk.Management), dash(tk.Description), formatTokenTime(tk.Created, "-"), exp)
				}
				return t.flush()
			})
		},
	}
}

// newTokenRevokeCmd returns "ghba token revoke".
func newTokenRevokeCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke TOKEN",
		Short: "Revoke a token given by its secret or its accessor",
		Long: `Revoke a token: TOKEN is its secret, or its accessor (as "ghba token list"
shows it, or a longer prefix of the secret's SHA-256). "-" reads the secret
from the first line of stdin, so that it does not show in ps. Prints
"revoked ACCESSOR"; with --json {accessor}. A token that does not exist
exits with code 3. A node may accept the revoked token for up to a second
more (each node caches what it read of a token that long).`,
		Example: `  ghba token revoke 3f2a9c01b7de
  ghba token revoke - < leaked.token`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			token := strings.TrimSpace(args[0])
			if token == "-" {
				line, err := bufio.NewReader(io.LimitReader(cmd.InOrStdin(), maxPasswordLine)).ReadString('\n')
				if err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("token revoke: reading the token from stdin: %w", err)
				}
				token = strings.TrimSpace(line)
			}
			if token == "" {
				return usageErrorf("token revoke: no token given")
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.ACLRevoke(ctx, token)
				if err != nil {
					return aclError("token revoke", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", r.Accessor)
				return err
			})
		},
	}
}

// newWhoAmICmd returns "ghba whoami".
func newWhoAmICmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show the user the token belongs to",
		Long: `Show who the token (--token, $GHBA_TOKEN or the one "ghba login" saved)
belongs to: name, uid, gid, groups and management role. No token, or an
unknown, revoked or expired one, exits with code 7. With --json: {name,
uid, gid, groups, management}.`,
		Example: `  ghba whoami
  ghba whoami --json | jq .uid`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				u, err := c.ACLWhoAmI(ctx)
				if err != nil {
					return aclError("whoami", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), u)
				}
				return printUser(cmd.OutOrStdout(), u)
			})
		},
	}
}

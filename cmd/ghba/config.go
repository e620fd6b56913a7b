package main

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/ghba/ghba/node"
)

// envPrefix is the prefix of the environment variables that override
// config keys: GHBA_NODE_ID, GHBA_PORTS_RPC, GHBA_RETRY_JOIN ("a:1,b:2").
const envPrefix = "GHBA"

// Log formats of the agent (config key log_format, flag --log-format).
const (
	logFormatText = "text"
	logFormatJSON = "json"
)

// agentConfig is everything "ghba agent" reads: the node's configuration
// plus the keys only the process itself uses. The mapstructure names are
// the config-file keys.
type agentConfig struct {
	node.Config `mapstructure:",squash"`
	// LogFormat is "text" or "json".
	LogFormat string `mapstructure:"log_format"`
}

// defaultAgentConfig returns node.DefaultConfig plus the agent's defaults.
func defaultAgentConfig() agentConfig {
	return agentConfig{Config: node.DefaultConfig(), LogFormat: logFormatText}
}

// validate checks the agent's keys, then the node's (node.Config.Validate,
// which also makes data_dir absolute).
func (c *agentConfig) validate() error {
	switch c.LogFormat {
	case logFormatText, logFormatJSON:
	default:
		return fmt.Errorf("%w: log_format: %q must be text or json", node.ErrConfig, c.LogFormat)
	}
	return c.Config.Validate()
}

// configKey is one leaf key of agentConfig: its dotted name ("ports.rpc")
// and the struct field's default value.
type configKey struct {
	name string
	def  any
}

// configKeys returns every leaf key of agentConfig with its default, in
// struct order. Nested structs (ports) become dotted keys; time.Duration
// and slices are leaves.
func configKeys() []configKey {
	var keys []configKey
	d := defaultAgentConfig()
	walkConfig(reflect.ValueOf(d), "", func(name string, v reflect.Value) {
		def := v.Interface()
		if v.Kind() == reflect.Slice && v.IsNil() {
			// viper drops nil defaults from AllKeys, and then an
			// environment override of the key would be ignored.
			def = reflect.MakeSlice(v.Type(), 0, 0).Interface()
		}
		keys = append(keys, configKey{name, def})
	})
	return keys
}

// walkConfig calls leaf for every leaf field of the struct v, named by the
// mapstructure tags joined with dots (squashed structs add no prefix).
func walkConfig(v reflect.Value, prefix string, leaf func(name string, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("mapstructure")
		name, opts, _ := strings.Cut(tag, ",")
		fv := v.Field(i)
		if opts == "squash" {
			walkConfig(fv, prefix, leaf)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		if fv.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]() {
			walkConfig(fv, prefix+name+".", leaf)
			continue
		}
		leaf(prefix+name, fv)
	}
}

// secretKeys are the config keys whose values are never printed.
var secretKeys = map[string]bool{"encrypt": true, "acl.server_token": true}

// configMap returns c as nested maps keyed by config key (for printing the
// effective configuration); secrets show as "(redacted)".
func configMap(c agentConfig) map[string]any {
	out := map[string]any{}
	walkConfig(reflect.ValueOf(c), "", func(name string, v reflect.Value) {
		m := out
		parts := strings.Split(name, ".")
		for _, p := range parts[:len(parts)-1] {
			sub, ok := m[p].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[p] = sub
			}
			m = sub
		}
		val := v.Interface()
		if d, ok := val.(time.Duration); ok {
			val = d.String()
		}
		if secretKeys[name] && val != "" {
			val = "(redacted)"
		}
		m[parts[len(parts)-1]] = val
	})
	return out
}

// agentFlag binds a command-line flag to a config key.
type agentFlag struct {
	flag, key, usage string
}

// agentFlags are the agent's config flags. Their defaults shown in --help
// come from defaultAgentConfig; the value given on the command line wins
// over the environment and the file.
var agentFlags = []agentFlag{
	{"node-id", "node_id", "unique id of this node in the cluster"},
	{"data-dir", "data_dir", "directory for the node's Badger store, Raft log and snapshots"},
	{"bind-addr", "bind_addr", "IP address to listen on"},
	{"advertise-addr", "advertise_addr", "IP address other nodes use to reach this one (default: bind_addr)"},
	{"rpc-port", "ports.rpc", "RPC port (clients and servers)"},
	{"raft-port", "ports.raft", "Raft port"},
	{"serf-port", "ports.serf", "Serf gossip port (TCP and UDP)"},
	{"http-port", "ports.http", "HTTP port (/metrics, /v1/status)"},
	{"group", "group", `group name, or "auto" to let the cluster choose`},
	{"bootstrap", "bootstrap", "bootstrap a new cluster with this node (first node only)"},
	{"retry-join", "retry_join", "Serf address (host:port) of an existing member to join; repeatable"},
	{"max-group-size", "max_group_size", `maximum number of nodes per group (M), or "auto" (with group auto) to let each group's leader choose it by G-HBA's model`},
	{"replication", "replication", "copies of each shard, on members of its group (1: a single home)"},
	{"shard-log-store", "shard_log_store", "Raft log store of new shard replicas: wal (raft-wal, one fsync per append) or boltdb (raft-boltdb, two)"},
	{"bits-per-file", "bits_per_file", "bits per file of the local and segment Bloom filters"},
	{"lru-entries", "lru_entries", "entries of the LRU list behind the L1 filter"},
	{"l1-admission", "l1_admission", "how a path enters the LRU list: lru (every use) or frequency (its second use within a window)"},
	{"placement", "placement", "home placement policy for new paths: colocate (files with their directory), balanced, random or parent"},
	{"scheme", "scheme", "routing scheme: auto (G-HBA, routing as HBA while filter_memory_mb holds every filter), ghba (segment replicas + group multicast) or hba (every node holds every filter)"},
	{"cache-lease", "cache_lease", "lease under which clients may cache inodes (0: no client caching)"},
	{"log-level", "log_level", "log level: debug, info, warn or error"},
	{"log-format", "log_format", "log format: text or json"},
}

// addAgentFlags defines agentFlags on fs with the defaults of
// defaultAgentConfig, typed like the config fields.
func addAgentFlags(fs *pflag.FlagSet) {
	defs := map[string]any{}
	for _, k := range configKeys() {
		defs[k.name] = k.def
	}
	for _, f := range agentFlags {
		switch d := defs[f.key].(type) {
		case string:
			fs.String(f.flag, d, f.usage)
		case bool:
			fs.Bool(f.flag, d, f.usage)
		case int:
			fs.Int(f.flag, d, f.usage)
		case node.GroupSize:
			fs.String(f.flag, d.String(), f.usage)
		case float64:
			fs.Float64(f.flag, d, f.usage)
		case []string:
			fs.StringSlice(f.flag, d, f.usage)
		case time.Duration:
			fs.Duration(f.flag, d, f.usage)
		default:
			panic(fmt.Sprintf("agent flag --%s: unsupported type %T of key %s", f.flag, d, f.key))
		}
	}
}

// loadConfig builds the agent's configuration from, in increasing order of
// precedence: the defaults, the config file (if file is not empty), GHBA_*
// environment variables (key in upper case, dots as underscores) and the
// flags in fs that were set. Unknown keys, values of the wrong type and
// values that fail validation are errors that name the key.
func loadConfig(file string, fs *pflag.FlagSet) (agentConfig, error) {
	v := viper.New()
	keys := configKeys()
	known := make(map[string]bool, len(keys))
	for _, k := range keys {
		v.SetDefault(k.name, k.def)
		known[k.name] = true
	}
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if fs != nil {
		for _, f := range agentFlags {
			if fl := fs.Lookup(f.flag); fl != nil {
				if err := v.BindPFlag(f.key, fl); err != nil {
					return agentConfig{}, fmt.Errorf("binding flag --%s: %w", f.flag, err)
				}
			}
		}
	}
	if file != "" {
		v.SetConfigFile(file)
		if ext := strings.TrimPrefix(filepath.Ext(file), "."); !slices.Contains(viper.SupportedExts, ext) {
			v.SetConfigType("yaml")
		}
		if err := v.ReadInConfig(); err != nil {
			return agentConfig{}, fmt.Errorf("reading config file %s: %w", file, err)
		}
		if err := checkUnknownKeys(v.AllKeys(), known); err != nil {
			return agentConfig{}, fmt.Errorf("config file %s: %w", file, err)
		}
	}
	cfg := defaultAgentConfig()
	if err := v.UnmarshalExact(&cfg, strictDecoding); err != nil {
		return agentConfig{}, decodeError(err)
	}
	if err := cfg.validate(); err != nil {
		return agentConfig{}, err
	}
	return cfg, nil
}

// strictDecoding replaces viper's weakly typed decoding (which truncates
// 7.5 to 7, reads a bare 5 as 5ns and true as 1) with strictHook.
func strictDecoding(c *mapstructure.DecoderConfig) {
	c.WeaklyTypedInput = false
	c.DecodeHook = strictHook
}

// strictHook converts the values viper hands over to the field types:
// strings (environment variables, flags, quoted YAML) are parsed into
// numbers, booleans, durations and comma-separated lists; integers are
// accepted for strings (node_id: 7) and integral floats for integers.
// Anything else that does not fit is an error, which mapstructure prefixes
// with the key.
func strictHook(from, to reflect.Type, data any) (any, error) {
	bad := func() (any, error) {
		return nil, fmt.Errorf("%s is not a valid %s", fmtValue(data), typeName(to))
	}
	if to == reflect.TypeFor[time.Duration]() {
		switch d := data.(type) {
		case time.Duration:
			return d, nil
		case string:
			v, err := time.ParseDuration(strings.TrimSpace(d))
			if err != nil {
				return bad()
			}
			return v, nil
		}
		return bad()
	}
	rv := reflect.ValueOf(data)
	if to == reflect.TypeFor[node.GroupSize]() {
		switch from.Kind() {
		case reflect.String:
			g, err := node.ParseGroupSize(rv.String())
			if err != nil {
				return nil, err
			}
			return g, nil
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if rv.Int() == 0 && from != to {
				return nil, fmt.Errorf("0 members: set auto to let the cluster choose")
			}
			return node.GroupSize(rv.Int()), nil
		case reflect.Float32, reflect.Float64:
			if f := rv.Float(); f != math.Trunc(f) || f == 0 || math.Abs(f) > 1<<20 {
				return bad()
			}
			return node.GroupSize(rv.Float()), nil
		}
		return bad()
	}
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		switch from.Kind() {
		case reflect.String:
			n, err := strconv.ParseInt(strings.TrimSpace(rv.String()), 10, 64)
			if err != nil {
				return bad()
			}
			return n, nil
		case reflect.Float32, reflect.Float64:
			if f := rv.Float(); f != math.Trunc(f) || math.Abs(f) > 1<<53 {
				return bad()
			}
			return int64(rv.Float()), nil
		case reflect.Bool:
			return bad()
		}
	case reflect.Float32, reflect.Float64:
		switch from.Kind() {
		case reflect.String:
			f, err := strconv.ParseFloat(strings.TrimSpace(rv.String()), 64)
			if err != nil {
				return bad()
			}
			return f, nil
		case reflect.Bool:
			return bad()
		}
	case reflect.Bool:
		if from.Kind() == reflect.String {
			b, err := strconv.ParseBool(strings.TrimSpace(rv.String()))
			if err != nil {
				return bad()
			}
			return b, nil
		}
	case reflect.String:
		switch from.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			return strconv.FormatInt(rv.Int(), 10), nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			return strconv.FormatUint(rv.Uint(), 10), nil
		}
	case reflect.Slice:
		if from.Kind() == reflect.String && to.Elem().Kind() == reflect.String {
			var out []string
			for part := range strings.SplitSeq(rv.String(), ",") {
				if part = strings.TrimSpace(part); part != "" {
					out = append(out, part)
				}
			}
			return out, nil
		}
	}
	return data, nil
}

// checkUnknownKeys returns an error naming every key in all that is neither
// a known leaf key nor a prefix of one ("ports"); for a key below an
// unknown map it names the outermost unknown part ("foo" for "foo.bar").
func checkUnknownKeys(all []string, known map[string]bool) error {
	prefixes := map[string]bool{}
	for k := range known {
		for i := range len(k) {
			if k[i] == '.' {
				prefixes[k[:i]] = true
			}
		}
	}
	seen := map[string]bool{}
	var bad []string
	for _, k := range all {
		if known[k] || prefixes[k] {
			continue
		}
		parts := strings.Split(k, ".")
		name := k
		for i := 1; i <= len(parts); i++ {
			p := strings.Join(parts[:i], ".")
			if known[p] {
				// A known leaf given as a map: a type error that
				// UnmarshalExact reports.
				name = ""
				break
			}
			if !prefixes[p] {
				name = p
				break
			}
		}
		if name != "" && !seen[name] {
			seen[name] = true
			bad = append(bad, name)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	if len(bad) == 1 {
		return fmt.Errorf("%w: unknown key %q", node.ErrConfig, bad[0])
	}
	return fmt.Errorf("%w: unknown keys %s", node.ErrConfig, quoteAll(bad))
}

// quoteAll quotes each string and joins them with ", ".
func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// decodeError rewrites mapstructure's errors as "invalid config: KEY:
// reason" lines, one per bad key.
func decodeError(err error) error {
	var lines []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		var de *mapstructure.DecodeError
		if !errors.As(e, &de) {
			lines = append(lines, e.Error())
			return
		}
		key, reason := de.Name(), de.Unwrap()
		var pe *mapstructure.ParseError
		var ue *mapstructure.UnconvertibleTypeError
		switch {
		case errors.As(reason, &pe):
			lines = append(lines, fmt.Sprintf("%s: %s is not a valid %s", key, fmtValue(pe.Value), typeName(pe.Expected.Type())))
		case errors.As(reason, &ue):
			lines = append(lines, fmt.Sprintf("%s: %s is not a valid %s", key, fmtValue(ue.Value), typeName(ue.Expected.Type())))
		case strings.HasPrefix(reason.Error(), "has invalid keys: "):
			names := strings.Split(strings.TrimPrefix(reason.Error(), "has invalid keys: "), ", ")
			for i, n := range names {
				if key != "" {
					names[i] = key + "." + n
				}
			}
			lines = append(lines, "unknown key "+quoteAll(names))
		default:
			lines = append(lines, fmt.Sprintf("%s: %v", key, reason))
		}
	}
	walk(err)
	sort.Strings(lines)
	return fmt.Errorf("%w: %s", node.ErrConfig, strings.Join(lines, "; "))
}

// fmtValue prints a config value for an error message (strings quoted).
func fmtValue(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%v", v)
}

// typeName names a config field's type for an error message.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if t == reflect.TypeFor[time.Duration]() {
			return "duration (e.g. 2s)"
		}
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	case reflect.String:
		return "string"
	case reflect.Slice:
		return "list"
	case reflect.Struct, reflect.Map:
		return "map"
	}
	return t.String()
}

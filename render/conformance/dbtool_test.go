//go:build tiledconformance

package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/render"
)

// The backup program of the backup and restore Jobs (render/dbtool.sh, embedded as render.DBTool),
// run on this machine as a Job runs it: `sh -c "$DBTool" dbtool.sh MODE` with the Job's environment,
// as the Jobs' non-root user, against fresh databases on the suite's PostgreSQL and against both
// targets: a directory (a claim) and a real S3 server (versitygw, started by
// hack/tiled/conformance.sh). /dev/termination-log is not writable here; the report the operator
// reads from it is also the last line of stdout, and a failure's reason the last line of stderr.

// dbtoolTargets are the kinds of target every case runs against.
var dbtoolTargets = []string{"dir", "s3"}

// dbtoolTimeLayout is a backup's default name: the UTC time it began.
const dbtoolTimeLayout = "20060102T150405Z"

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// asJobUser: the Jobs run as render.RunAsUser; when the tests run as root, dbtool.sh does too (so
// that nothing it can only do as root passes here, and /dev/termination-log is not written).
func asJobUser() bool { return os.Geteuid() == 0 }

// chownJob gives a path (and everything under it) to the Jobs' user, as fsGroup does for a claim.
func chownJob(t *testing.T, p string) {
	t.Helper()
	if !asJobUser() {
		return
	}
	id := int(render.RunAsUser)
	err := filepath.Walk(p, func(q string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(q, id, id)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// scratch is a directory the Jobs' user can write (t.TempDir's parents are root's only).
func scratch(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "tiled-dbtool-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	chownJob(t, d)
	return d
}

// --- S3 --------------------------------------------------------------------------------------------

// s3Server is the suite's S3 server.
type s3Server struct{ endpoint, access, secret string }

func getS3(t *testing.T) s3Server {
	t.Helper()
	get := func(k string) string {
		v := os.Getenv(k)
		if v == "" {
			t.Fatalf("%s is not set: run hack/tiled/conformance.sh (make test-tiled), which starts an S3 server (versitygw)", k)
		}
		return v
	}
	return s3Server{
		endpoint: get("TILED_CONFORMANCE_S3_ENDPOINT"),
		access:   get("TILED_CONFORMANCE_S3_ACCESS_KEY"),
		secret:   get("TILED_CONFORMANCE_S3_SECRET_KEY"),
	}
}

// curl sends one request signed with AWS Signature Version 4 (as dbtool.sh does) to path (a bucket
// or an object, with a query).
func (s s3Server) curl(path string, args ...string) ([]byte, error) {
	all := append([]string{"--silent", "--show-error", "--fail", "--max-time", "120",
		"--aws-sigv4", "aws:amz:us-east-1:s3", "--user", s.access + ":" + s.secret,
		"-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"}, args...)
	cmd := exec.Command("curl", append(all, strings.TrimSuffix(s.endpoint, "/")+"/"+path)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("curl %s: %v: %s", path, err, stderr.String())
	}
	return out, nil
}

// listPage is one ListObjectsV2 answer.
type listPage struct {
	KeyCount              int    `xml:"KeyCount"`
	MaxKeys               int    `xml:"MaxKeys"`
	IsTruncated           bool   `xml:"IsTruncated"`
	NextContinuationToken string `xml:"NextContinuationToken"`
	Contents              []struct {
		Key  string `xml:"Key"`
		Size int64  `xml:"Size"`
	} `xml:"Contents"`
}

func (s s3Server) listPage(t *testing.T, bucket, prefix, token string) listPage {
	t.Helper()
	q := url.Values{"list-type": {"2"}, "prefix": {prefix}}
	if token != "" {
		q.Set("continuation-token", token)
	}
	out, err := s.curl(bucket + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	var p listPage
	if err := xml.Unmarshal(out, &p); err != nil {
		t.Fatalf("ListObjectsV2: %v\n%s", err, out)
	}
	return p
}

// keys lists every key under prefix, following continuation tokens.
func (s s3Server) keys(t *testing.T, bucket, prefix string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	token := ""
	for {
		p := s.listPage(t, bucket, prefix, token)
		for _, c := range p.Contents {
			out[c.Key] = c.Size
		}
		if !p.IsTruncated {
			return out
		}
		token = p.NextContinuationToken
	}
}

func objectPath(bucket, key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return bucket + "/" + strings.Join(parts, "/")
}

// --- targets ---------------------------------------------------------------------------------------

// dbtoolTarget is where one case's backups go: a directory (BACKUP_ROOT, as a claim) or a prefix of a
// bucket of its own on the S3 server.
type dbtoolTarget struct {
	t      *testing.T
	kind   string
	root   string // dir
	s3     s3Server
	bucket string // s3
	prefix string // s3
}

func newTarget(t *testing.T, kind string) *dbtoolTarget {
	t.Helper()
	tg := &dbtoolTarget{t: t, kind: kind}
	switch kind {
	case "dir":
		// As the Job's claim path: created by dbtool.sh under a mount the Job's user can write.
		tg.root = filepath.Join(scratch(t), "tiled-backups", "conformance", "dbtool")
	case "s3":
		tg.s3 = getS3(t)
		tg.bucket = "dbtool-" + randomHex(t, 6)
		tg.prefix = "tiled-backups/conformance/dbtool"
		if _, err := tg.s3.curl(tg.bucket, "-X", "PUT"); err != nil {
			t.Fatalf("creating bucket %s: %v", tg.bucket, err)
		}
	default:
		t.Fatalf("unknown target %q", kind)
	}
	return tg
}

// env is the target's part of the Job's environment (render.targetPod's).
func (tg *dbtoolTarget) env() []string {
	if tg.kind == "dir" {
		return []string{"TARGET=dir", "BACKUP_ROOT=" + tg.root}
	}
	return []string{"TARGET=s3", "S3_ENDPOINT=" + tg.s3.endpoint, "S3_BUCKET=" + tg.bucket, "S3_PREFIX=" + tg.prefix,
		"S3_REGION=us-east-1", "AWS_ACCESS_KEY_ID=" + tg.s3.access, "AWS_SECRET_ACCESS_KEY=" + tg.s3.secret}
}

// entries lists what the target holds, one entry per backup whole or not: on a directory its
// entries (NAME, .NAME.partial), on S3 the NAME of every NAME/ key group; sorted.
func (tg *dbtoolTarget) entries() []string {
	tg.t.Helper()
	var out []string
	switch tg.kind {
	case "dir":
		des, err := os.ReadDir(tg.root)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			tg.t.Fatal(err)
		}
		for _, de := range des {
			out = append(out, de.Name())
		}
	case "s3":
		seen := map[string]bool{}
		for k := range tg.s3.keys(tg.t, tg.bucket, tg.prefix+"/") {
			seen[strings.SplitN(strings.TrimPrefix(k, tg.prefix+"/"), "/", 2)[0]] = true
		}
		for n := range seen {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// partial is the entry of a backup begun and not whole.
func (tg *dbtoolTarget) partial(name string) string {
	if tg.kind == "dir" {
		return "." + name + ".partial"
	}
	return name
}

// files reads every file of entry (NAME, or .NAME.partial on a directory).
func (tg *dbtoolTarget) files(entry string) map[string][]byte {
	tg.t.Helper()
	out := map[string][]byte{}
	switch tg.kind {
	case "dir":
		des, err := os.ReadDir(filepath.Join(tg.root, entry))
		if err != nil {
			tg.t.Fatal(err)
		}
		for _, de := range des {
			out[de.Name()] = tg.read(entry, de.Name())
		}
	case "s3":
		for k := range tg.s3.keys(tg.t, tg.bucket, tg.prefix+"/"+entry+"/") {
			f := strings.TrimPrefix(k, tg.prefix+"/"+entry+"/")
			out[f] = tg.read(entry, f)
		}
	}
	return out
}

func (tg *dbtoolTarget) read(entry, file string) []byte {
	tg.t.Helper()
	if tg.kind == "dir" {
		b, err := os.ReadFile(filepath.Join(tg.root, entry, file))
		if err != nil {
			tg.t.Fatal(err)
		}
		return b
	}
	b, err := tg.s3.curl(objectPath(tg.bucket, tg.prefix+"/"+entry+"/"+file))
	if err != nil {
		tg.t.Fatal(err)
	}
	return b
}

// write puts file into entry, as the Jobs' user would have.
func (tg *dbtoolTarget) write(entry, file string, data []byte) {
	tg.t.Helper()
	switch tg.kind {
	case "dir":
		d := filepath.Join(tg.root, entry)
		if err := os.MkdirAll(d, 0o755); err != nil {
			tg.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, file), data, 0o644); err != nil {
			tg.t.Fatal(err)
		}
		chownJob(tg.t, filepath.Dir(tg.root))
	case "s3":
		f := filepath.Join(tg.t.TempDir(), "object")
		if err := os.WriteFile(f, data, 0o644); err != nil {
			tg.t.Fatal(err)
		}
		if _, err := tg.s3.curl(objectPath(tg.bucket, tg.prefix+"/"+entry+"/"+file), "-T", f, "-o", "/dev/null"); err != nil {
			tg.t.Fatal(err)
		}
	}
}

func (tg *dbtoolTarget) remove(entry, file string) {
	tg.t.Helper()
	if tg.kind == "dir" {
		if err := os.Remove(filepath.Join(tg.root, entry, file)); err != nil {
			tg.t.Fatal(err)
		}
		return
	}
	if _, err := tg.s3.curl(objectPath(tg.bucket, tg.prefix+"/"+entry+"/"+file), "-X", "DELETE"); err != nil {
		tg.t.Fatal(err)
	}
}

// writePartial leaves what a backup Job that died part way leaves: on a directory, .NAME.partial
// holding every file, the manifest too (it died before the rename); on S3, every file but the
// manifest (uploaded last).
func (tg *dbtoolTarget) writePartial(name string, whole map[string][]byte) {
	tg.t.Helper()
	for f, b := range whole {
		if tg.kind == "s3" && f == "manifest.json" {
			continue
		}
		if f == "manifest.json" {
			b = bytes.ReplaceAll(b, []byte(`"name":"`), []byte(`"name":"`+name+`-was-`))
		}
		tg.write(tg.partial(name), f, b)
	}
}

// --- databases -------------------------------------------------------------------------------------

// dbtoolDB is one database of an instance, owned by a role of its own.
type dbtoolDB struct{ name, role, password string }

// dbtoolInstance is an instance's catalog, storage and auth databases, fresh on the suite's server.
// The catalog and storage databases are reached as a managed instance's are (postgresql://host/db,
// PGUSER and PGPASSWORD); the auth database as an external Secret's URI is (SQLAlchemy's
// postgresql+asyncpg:// with its own role's credentials in it: PGUSER's would be refused there).
type dbtoolInstance struct {
	t   *testing.T
	e   suiteEnv
	dbs map[string]dbtoolDB
}

var dbtoolDatabases = []string{"catalog", "storage", "auth"}

func newInstance(t *testing.T, e suiteEnv) *dbtoolInstance {
	t.Helper()
	id := randomHex(t, 4)
	in := &dbtoolInstance{t: t, e: e, dbs: map[string]dbtoolDB{}}
	managed := dbtoolDB{role: "dbt_" + id, password: randomHex(t, 12)}
	external := dbtoolDB{role: "dbt_" + id + "_ext", password: randomHex(t, 12)}
	e.sql(t,
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", managed.role, managed.password),
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", external.role, external.password))
	for _, db := range dbtoolDatabases {
		d := managed
		if db == "auth" {
			d = external
		}
		d.name = "dbt_" + id + "_" + db
		e.sql(t, fmt.Sprintf("CREATE DATABASE %s OWNER %s", d.name, d.role))
		in.dbs[db] = d
	}
	t.Cleanup(func() {
		for _, d := range in.dbs {
			e.sql(t, "DROP DATABASE IF EXISTS "+d.name+" WITH (FORCE)")
		}
		e.sql(t, "DROP ROLE IF EXISTS "+managed.role, "DROP ROLE IF EXISTS "+external.role)
	})
	return in
}

// env is the databases' part of the Job's environment (render.databaseEnv's).
func (in *dbtoolInstance) env() []string {
	c, s, a := in.dbs["catalog"], in.dbs["storage"], in.dbs["auth"]
	return []string{
		"HOME=/tmp", "INSTANCE=conformance/dbtool",
		"PGUSER=" + c.role, "PGPASSWORD=" + c.password,
		"DUMP_CATALOG_URI=postgresql://" + in.e.pg + "/" + c.name,
		"DUMP_STORAGE_URI=postgresql://" + in.e.pg + "/" + s.name,
		fmt.Sprintf("DUMP_AUTH_URI=postgresql+asyncpg://%s:%s@%s/%s", a.role, a.password, in.e.pg, a.name),
	}
}

// sql runs a script in database db as its owner (as Tiled, which owns its tables, would).
func (in *dbtoolInstance) sql(db, script string) {
	in.t.Helper()
	d := in.dbs[db]
	host, port, _ := net.SplitHostPort(in.e.pg)
	cmd := exec.Command(in.e.psql, "-h", host, "-p", port, "-U", d.role, "-d", d.name, "-v", "ON_ERROR_STOP=1", "-q", "-X", "-1", "-f", "-")
	cmd.Env = append(os.Environ(), "PGPASSWORD="+d.password)
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		in.t.Fatalf("psql in %s: %v\n%s\n%s", db, err, out, script)
	}
}

// The catalog's and auth's revisions, as Tiled's alembic_version tables hold them.
const (
	dbtoolCatalogRevision = "ed3a4223a600"
	dbtoolAuthRevision    = "d88e91ea03f9"
)

// seed gives every database an empty public schema, then what a beamline's databases hold: the
// catalog its revision, the btree_gin extension Tiled creates, nodes (jsonb with quotes and newlines,
// bytea, NULLs, timestamps, a serial), a foreign key and indexes; storage an appendable table's rows
// (no revision: Tiled keeps none there); auth its revision and principals.
func (in *dbtoolInstance) seed() {
	in.t.Helper()
	in.clear()
	in.sql("catalog", `
CREATE EXTENSION IF NOT EXISTS btree_gin;
CREATE TABLE alembic_version (version_num varchar(32) NOT NULL PRIMARY KEY);
INSERT INTO alembic_version VALUES ('`+dbtoolCatalogRevision+`');
CREATE TABLE nodes (id serial PRIMARY KEY, parent int, key text NOT NULL, metadata jsonb, data bytea, created timestamptz);
INSERT INTO nodes (parent, key, metadata, data, created)
	SELECT i / 10, 'scan-' || i,
		jsonb_build_object('motor', i * 1.5, 'note', 'it''s "quoted"' || E'\n' || 'and multi-line, row ' || i),
		decode(md5(i::text), 'hex'), timestamptz '2026-01-01 00:00:00+00' + i * interval '1 minute'
	FROM generate_series(1, 200) AS i;
INSERT INTO nodes (key) VALUES ('empty');
CREATE INDEX nodes_top ON nodes USING gin (parent, metadata);
CREATE TABLE data_sources (id serial PRIMARY KEY, node_id int NOT NULL REFERENCES nodes (id) ON DELETE CASCADE, uri text);
INSERT INTO data_sources (node_id, uri) SELECT id, 'file:///nsls2/data/' || key || '.h5' FROM nodes WHERE id % 3 = 0;
`)
	in.sql("storage", `
CREATE TABLE "table_conformance_rows" (partition int, t double precision, i0 bigint, label text);
INSERT INTO "table_conformance_rows" SELECT i % 2, i * 0.5, i * 7, 'row ' || i FROM generate_series(1, 500) AS i;
`)
	in.sql("auth", `
CREATE TABLE alembic_version (version_num varchar(32) NOT NULL PRIMARY KEY);
INSERT INTO alembic_version VALUES ('`+dbtoolAuthRevision+`');
CREATE TABLE principals (uuid uuid PRIMARY KEY, type text NOT NULL);
INSERT INTO principals VALUES ('6f1c2a9e-9a0d-4c59-8f53-4f3b1d2c7e11', 'user'), ('0d9b3c1a-2f4e-4b6d-9c8a-7e5f3a2b1c0d', 'service');
`)
}

// clear leaves every database with an empty public schema (a new instance's).
func (in *dbtoolInstance) clear() {
	in.t.Helper()
	for _, db := range dbtoolDatabases {
		in.sql(db, "DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
	}
}

// change alters every database: rows deleted and changed, a table added, a revision moved.
func (in *dbtoolInstance) change(table string) {
	in.t.Helper()
	in.sql("catalog", `
DELETE FROM nodes WHERE id > 100;
UPDATE nodes SET metadata = '{"changed": true}' WHERE id = 1;
INSERT INTO nodes (key) VALUES ('after the backup');
UPDATE alembic_version SET version_num = 'ffffffffffff';
CREATE TABLE `+table+` (a int); INSERT INTO `+table+` VALUES (1), (2);
`)
	in.sql("storage", `DELETE FROM "table_conformance_rows" WHERE partition = 1; CREATE TABLE `+table+` (a int);`)
	in.sql("auth", `DELETE FROM principals WHERE type = 'service'; DROP TABLE IF EXISTS alembic_version;`)
}

// snapshot is every database's content: per table (and for the sequences) every row, sorted, and
// the extensions.
func (in *dbtoolInstance) snapshot() map[string]string {
	in.t.Helper()
	out := map[string]string{}
	for _, db := range dbtoolDatabases {
		name := in.dbs[db].name
		tables := in.e.query(in.t, name, `SELECT coalesce(string_agg(table_name, ' ' ORDER BY table_name), '')
			FROM information_schema.tables WHERE table_schema = 'public'`)
		out[db+" tables"] = tables
		for _, tb := range strings.Fields(tables) {
			out[db+"."+tb] = in.e.query(in.t, name, fmt.Sprintf(`SELECT count(*) || E'\n' ||
				coalesce(string_agg(r::text, E'\n' ORDER BY r::text), '') FROM public.%q AS r`, tb))
		}
		out[db+" sequences"] = in.e.query(in.t, name, `SELECT coalesce(string_agg(sequencename || '=' ||
			coalesce(last_value::text, 'unset'), ' ' ORDER BY sequencename), '') FROM pg_sequences WHERE schemaname = 'public'`)
		out[db+" indexes"] = in.e.query(in.t, name, `SELECT coalesce(string_agg(indexdef, E'\n' ORDER BY indexdef), '')
			FROM pg_indexes WHERE schemaname = 'public'`)
		out[db+" extensions"] = in.e.query(in.t, name, `SELECT coalesce(string_agg(extname, ' ' ORDER BY extname), '')
			FROM pg_extension`)
	}
	return out
}

// dataDiff names what differs between two snapshots ("" when nothing does), briefly.
func dataDiff(got, want map[string]string) string {
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var diffs []string
	for _, k := range keysOf(keys) {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !wok:
			diffs = append(diffs, fmt.Sprintf("%s: unexpected (%.120q)", k, g))
		case !gok:
			diffs = append(diffs, fmt.Sprintf("%s: missing (want %.120q)", k, w))
		case g != w:
			diffs = append(diffs, fmt.Sprintf("%s: got %.200q, want %.200q", k, g, w))
		}
	}
	return strings.Join(diffs, "\n")
}

func (in *dbtoolInstance) count(db, table string) string {
	in.t.Helper()
	return in.e.query(in.t, in.dbs[db].name, "SELECT count(*) FROM public."+table)
}

// --- running dbtool.sh -----------------------------------------------------------------------------

type dbtoolRun struct {
	mode           string
	stdout, stderr string
	err            error
}

// dbtool runs `sh -c "$DBTool" dbtool.sh mode` (the Jobs' command) with the instance's and the
// target's environment, a fresh WORK, and env last (later entries win).
func dbtool(t *testing.T, in *dbtoolInstance, tg *dbtoolTarget, mode string, env ...string) dbtoolRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", render.DBTool, "dbtool.sh", mode)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "WORK=" + filepath.Join(scratch(t), "dbtool")},
		append(append(in.env(), tg.env()...), env...)...)
	if asJobUser() {
		id := uint32(render.RunAsUser)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id, Gid: id}}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := dbtoolRun{mode: mode, stdout: stdout.String(), stderr: stderr.String(), err: err}
	t.Logf("dbtool.sh %s %s (%.1fs, %v):\n%s%s", mode, strings.Join(env, " "), time.Since(start).Seconds(), err, r.stderr, r.stdout)
	return r
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// ok is the report of a run that must succeed.
func (r dbtoolRun) ok(t *testing.T) string {
	t.Helper()
	if r.err != nil {
		t.Fatalf("dbtool.sh %s failed: %v\n%s%s", r.mode, r.err, r.stderr, r.stdout)
	}
	return lastLine(r.stdout)
}

// failed is the reason of a run that must fail: what it wrote to the termination log, which is also
// its last message on stderr (from its "[tiled-operator] " prefix on, possibly several lines).
func (r dbtoolRun) failed(t *testing.T) string {
	t.Helper()
	if r.err == nil {
		t.Fatalf("dbtool.sh %s succeeded, and must fail:\n%s%s", r.mode, r.stderr, r.stdout)
	}
	const prefix = "[tiled-operator] "
	msg := r.stderr
	if i := strings.LastIndex(msg, "\n"+prefix); i >= 0 {
		msg = msg[i+1:]
	}
	if !strings.HasPrefix(msg, prefix) {
		t.Fatalf("dbtool.sh %s failed without a message of its own:\n%s", r.mode, r.stderr)
	}
	return strings.TrimSuffix(strings.TrimPrefix(msg, prefix), "\n")
}

func reportJSON(t *testing.T, line string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, line)
	}
	return m
}

// backup takes backup name ("" for the default name) and returns its report.
func backup(t *testing.T, in *dbtoolInstance, tg *dbtoolTarget, name string, env ...string) map[string]any {
	t.Helper()
	if name != "" {
		env = append([]string{"BACKUP=" + name}, env...)
	}
	return reportJSON(t, dbtool(t, in, tg, "backup", env...).ok(t))
}

// restore restores name and returns its report.
func restore(t *testing.T, in *dbtoolInstance, tg *dbtoolTarget, name string, env ...string) map[string]any {
	t.Helper()
	return reportJSON(t, dbtool(t, in, tg, "restore", append([]string{"BACKUP=" + name}, env...)...).ok(t))
}

// list is `dbtool.sh list`: "NAME BYTES" lines, newest first.
func list(t *testing.T, in *dbtoolInstance, tg *dbtoolTarget) []string {
	t.Helper()
	r := dbtool(t, in, tg, "list")
	r.ok(t)
	out := strings.TrimSpace(r.stdout)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

func listed(t *testing.T, in *dbtoolInstance, tg *dbtoolTarget) []string {
	t.Helper()
	var names []string
	for _, l := range list(t, in, tg) {
		names = append(names, strings.Fields(l)[0])
	}
	return names
}

func nameAt(t time.Time) string { return t.UTC().Format(dbtoolTimeLayout) }

// forEachTarget runs a case against both targets, each with fresh databases and target, concurrently
// with the other cases (on the suite's PostgreSQL and S3 servers: the databases, roles and buckets
// are the case's own).
func forEachTarget(t *testing.T, f func(t *testing.T, e suiteEnv, in *dbtoolInstance, tg *dbtoolTarget)) {
	t.Parallel()
	e := getEnv(t)
	for _, kind := range dbtoolTargets {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // each its own databases and target
			f(t, e, newInstance(t, e), newTarget(t, kind))
		})
	}
}

// --- cases -----------------------------------------------------------------------------------------

// checkManifest checks a backup report against what the target holds: the manifest (the report less
// "available"), one custom-format dump per database whose size and SHA-256 the manifest and
// SHA256SUMS give, and nothing else. It returns the backup's bytes.
func checkManifest(t *testing.T, tg *dbtoolTarget, report map[string]any) int64 {
	t.Helper()
	g := NewWithT(t)
	name, _ := report["name"].(string)
	g.Expect(name).NotTo(BeEmpty())
	manifest := map[string]any{}
	for k, v := range report {
		if k != "available" {
			manifest[k] = v
		}
	}
	files := tg.files(name)
	g.Expect(files).To(HaveLen(5), "%s holds %v", name, keysOf(files))
	g.Expect(reportJSON(t, string(files["manifest.json"]))).To(Equal(manifest), "manifest.json is the report less available")
	g.Expect(manifest["time"]).To(MatchRegexp(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`))
	g.Expect(manifest["seconds"]).To(BeNumerically(">=", 0))
	listedFiles, _ := manifest["files"].([]any)
	g.Expect(listedFiles).To(HaveLen(len(dbtoolDatabases)))
	var sums strings.Builder
	var total int64
	for i, db := range dbtoolDatabases {
		f, _ := listedFiles[i].(map[string]any)
		data := files[db+".dump"]
		sum := sha256.Sum256(data)
		g.Expect(f).To(Equal(map[string]any{"database": db, "file": db + ".dump", "bytes": float64(len(data)), "sha256": hex.EncodeToString(sum[:])}))
		g.Expect(string(data[:5])).To(Equal("PGDMP"), "%s is a custom-format dump", db)
		fmt.Fprintf(&sums, "%s  %s.dump\n", hex.EncodeToString(sum[:]), db)
		total += int64(len(data))
	}
	g.Expect(string(files["SHA256SUMS"])).To(Equal(sums.String()))
	g.Expect(manifest["bytes"]).To(BeEquivalentTo(total))
	return total
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Backup, then restore by name and by "latest": the manifest describes the files exactly, the report
// lists what is available, and a restore brings every database back exactly as it was backed up
// (rows, values, sequences, indexes, the extension, owned by the instance's roles), tables made since
// gone. A backup of a name that exists already leaves it as it is.
func TestDBToolRoundTrip(t *testing.T) {
	forEachTarget(t, func(t *testing.T, e suiteEnv, in *dbtoolInstance, tg *dbtoolTarget) {
		g := NewWithT(t)
		in.seed()
		g.Expect(in.count("catalog", "nodes")).To(Equal("201"))
		a := in.snapshot()

		begun := time.Now().UTC().Truncate(time.Second)
		r1 := backup(t, in, tg, "", "TILED_VERSION="+expansion.TiledVersion)
		name1, _ := r1["name"].(string)
		g.Expect(name1).To(MatchRegexp(`^\d{8}T\d{6}Z$`))
		at, err := time.Parse(dbtoolTimeLayout, name1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(at).To(BeTemporally(">=", begun))
		g.Expect(at).To(BeTemporally("<=", time.Now().UTC()))
		g.Expect(r1["instance"]).To(Equal("conformance/dbtool"))
		g.Expect(r1["tiledVersion"]).To(Equal(expansion.TiledVersion))
		g.Expect(r1["revisions"]).To(Equal(map[string]any{"catalog": dbtoolCatalogRevision, "auth": dbtoolAuthRevision}))
		bytes1 := checkManifest(t, tg, r1)
		g.Expect(r1["available"]).To(Equal(fmt.Sprintf("%s:%d", name1, bytes1)))
		g.Expect(list(t, in, tg)).To(Equal([]string{fmt.Sprintf("%s %d", name1, bytes1)}))

		// Changed, and backed up again an hour later (by name).
		in.change("made_after_backup_1")
		b := in.snapshot()
		g.Expect(dataDiff(b, a)).NotTo(BeEmpty())
		name2 := nameAt(at.Add(time.Hour))
		r2 := backup(t, in, tg, name2, "TILED_VERSION="+expansion.TiledVersion)
		g.Expect(r2["name"]).To(Equal(name2))
		g.Expect(r2["revisions"]).To(Equal(map[string]any{"catalog": "ffffffffffff"}), "auth's alembic_version is gone")
		bytes2 := checkManifest(t, tg, r2)
		g.Expect(r2["available"]).To(Equal(fmt.Sprintf("%s:%d,%s:%d", name2, bytes2, name1, bytes1)))

		// Changed again; a backup of name1 again reports the one there and changes nothing.
		in.change("made_after_backup_2")
		files1 := tg.files(name1)
		again := reportJSON(t, dbtool(t, in, tg, "backup", "BACKUP="+name1).ok(t))
		g.Expect(again["name"]).To(Equal(name1))
		g.Expect(again["bytes"]).To(BeEquivalentTo(bytes1))
		g.Expect(tg.files(name1)).To(Equal(files1), "backup %s was rewritten", name1)

		// Restore by name: every database as backup 1 holds it, the tables made since gone.
		r := restore(t, in, tg, name1)
		g.Expect(r).To(HaveKeyWithValue("restored", name1))
		g.Expect(r).To(HaveKeyWithValue("tiledVersion", expansion.TiledVersion))
		g.Expect(dataDiff(in.snapshot(), a)).To(BeEmpty())
		g.Expect(in.count("catalog", "nodes")).To(Equal("201"))
		g.Expect(in.e.query(t, in.dbs["catalog"].name, "SELECT metadata->>'note' FROM nodes WHERE id = 1")).
			To(Equal("it's \"quoted\"\nand multi-line, row 1"))
		// Owned by the instance's roles (Tiled migrates them later), and usable: the serial goes on.
		for _, db := range dbtoolDatabases {
			g.Expect(in.e.query(t, in.dbs[db].name, "SELECT string_agg(DISTINCT tableowner, ' ') FROM pg_tables WHERE schemaname = 'public'")).
				To(Equal(in.dbs[db].role), db)
		}
		in.sql("catalog", "INSERT INTO nodes (key) VALUES ('after the restore')")
		g.Expect(in.e.query(t, in.dbs["catalog"].name, "SELECT id FROM nodes WHERE key = 'after the restore'")).To(Equal("202"))

		// Restore "latest": backup 2, with its own table and without the later one.
		r = restore(t, in, tg, "latest")
		g.Expect(r).To(HaveKeyWithValue("restored", name2))
		g.Expect(dataDiff(in.snapshot(), b)).To(BeEmpty())
		g.Expect(in.snapshot()["catalog tables"]).To(Equal("alembic_version data_sources made_after_backup_1 nodes"))
	})
}

// A backup begun and never finished (a Job that died) is neither listed, nor restored, nor taken as
// "latest", nor reported available; a later backup of its name replaces it.
func TestDBToolPartialBackups(t *testing.T) {
	forEachTarget(t, func(t *testing.T, e suiteEnv, in *dbtoolInstance, tg *dbtoolTarget) {
		g := NewWithT(t)
		in.seed()
		a := in.snapshot()
		const whole, died, cut, older = "20250101T000000Z", "20250102T000000Z", "20250103T000000Z", "20240101T000000Z"
		wholeBytes := checkManifest(t, tg, backup(t, in, tg, whole))
		files := tg.files(whole)
		// Newer: a Job that died writing (before the rename, or before the manifest's upload), and a
		// backup whose removal was cut short (its directory without the manifest; on S3 the manifest
		// goes first).
		tg.writePartial(died, files)
		tg.write(cut, "catalog.dump", files["catalog.dump"])
		tg.write(cut, "SHA256SUMS", files["SHA256SUMS"])
		g.Expect(tg.entries()).To(ConsistOf(whole, tg.partial(died), cut))

		g.Expect(list(t, in, tg)).To(Equal([]string{fmt.Sprintf("%s %d", whole, wholeBytes)}))
		in.change("made_after_the_backup")
		g.Expect(restore(t, in, tg, "latest")).To(HaveKeyWithValue("restored", whole))
		g.Expect(dataDiff(in.snapshot(), a)).To(BeEmpty())
		for _, n := range []string{died, cut} {
			msg := dbtool(t, in, tg, "restore", "BACKUP="+n).failed(t)
			g.Expect(msg).To(ContainSubstring("backup "+n+" not found"), n)
		}

		// A new backup reports only whole ones; without a retention nothing is pruned.
		r := backup(t, in, tg, older)
		olderBytes := checkManifest(t, tg, r)
		g.Expect(r["available"]).To(Equal(fmt.Sprintf("%s:%d,%s:%d", whole, wholeBytes, older, olderBytes)))
		g.Expect(tg.entries()).To(ConsistOf(whole, tg.partial(died), cut, older))

		// A backup of the cut one's name is whole, and restorable.
		in.change("made_before_the_new_backup")
		c := in.snapshot()
		cutBytes := checkManifest(t, tg, backup(t, in, tg, cut))
		g.Expect(list(t, in, tg)).To(Equal([]string{fmt.Sprintf("%s %d", cut, cutBytes), fmt.Sprintf("%s %d", whole, wholeBytes), fmt.Sprintf("%s %d", older, olderBytes)}))
		in.seed()
		g.Expect(restore(t, in, tg, "latest")).To(HaveKeyWithValue("restored", cut))
		g.Expect(dataDiff(in.snapshot(), c)).To(BeEmpty())
	})
}

// Retention: RETAIN_COUNT keeps that many whole backups (the one just taken always); RETAIN_DAYS
// prunes those older by name, but never the newest; a partial backup begun over a day ago is pruned,
// a younger one (a Job at work) is not.
func TestDBToolRetention(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	forEachTarget(t, func(t *testing.T, e suiteEnv, in *dbtoolInstance, tg *dbtoolTarget) {
		in.seed()
		t.Run("count", func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, tg.kind)
			var names []string
			for i := 4; i >= 1; i-- {
				n := nameAt(now.Add(-time.Duration(i) * time.Hour))
				backup(t, in, tg, n, "RETAIN_COUNT=2")
				names = append([]string{n}, names...)
				keep := names[:min(len(names), 2)]
				g.Expect(listed(t, in, tg)).To(Equal(keep))
				g.Expect(tg.entries()).To(ConsistOf(keep))
			}
			// One taken now under an older name is kept (it was just written), beside the two newest.
			oldest := nameAt(now.Add(-5 * time.Hour))
			r := backup(t, in, tg, oldest, "RETAIN_COUNT=2")
			g.Expect(listed(t, in, tg)).To(Equal([]string{names[0], names[1], oldest}))
			g.Expect(r["available"]).To(MatchRegexp(`^%s:\d+,%s:\d+,%s:\d+$`, names[0], names[1], oldest))
			newest := nameAt(now)
			backup(t, in, tg, newest, "RETAIN_COUNT=2")
			g.Expect(listed(t, in, tg)).To(Equal([]string{newest, names[0]}))
			g.Expect(tg.entries()).To(ConsistOf(newest, names[0]))
		})
		t.Run("days", func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, tg.kind)
			d40, d10, d3 := nameAt(now.AddDate(0, 0, -40)), nameAt(now.AddDate(0, 0, -10)), nameAt(now.AddDate(0, 0, -3))
			for _, n := range []string{d40, d10, d3} {
				backup(t, in, tg, n)
			}
			g.Expect(listed(t, in, tg)).To(Equal([]string{d3, d10, d40}))
			backup(t, in, tg, nameAt(now), "RETAIN_DAYS=7")
			g.Expect(listed(t, in, tg)).To(Equal([]string{nameAt(now), d3}))
			g.Expect(tg.entries()).To(ConsistOf(nameAt(now), d3))
		})
		t.Run("days keep the newest", func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, tg.kind)
			for _, n := range []string{"20200101T000000Z", "20200102T000000Z"} {
				backup(t, in, tg, n)
			}
			// Every backup is older than the cutoff: the newest stays, and the one just taken.
			backup(t, in, tg, "20190101T000000Z", "RETAIN_DAYS=7")
			g.Expect(listed(t, in, tg)).To(Equal([]string{"20200102T000000Z", "20190101T000000Z"}))
			g.Expect(tg.entries()).To(ConsistOf("20200102T000000Z", "20190101T000000Z"))
		})
		t.Run("stale partial", func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, tg.kind)
			first := nameAt(now.Add(-3 * time.Hour))
			backup(t, in, tg, first)
			files := tg.files(first)
			stale, young := nameAt(now.Add(-26*time.Hour)), nameAt(now.Add(-1*time.Hour))
			tg.writePartial(stale, files)
			tg.writePartial(young, files)
			// Without a retention, nothing is pruned.
			backup(t, in, tg, nameAt(now.Add(-2*time.Hour)))
			g.Expect(tg.entries()).To(ConsistOf(first, nameAt(now.Add(-2*time.Hour)), tg.partial(stale), tg.partial(young)))
			backup(t, in, tg, nameAt(now), "RETAIN_COUNT=5")
			g.Expect(tg.entries()).To(ConsistOf(first, nameAt(now.Add(-2*time.Hour)), nameAt(now), tg.partial(young)))
			g.Expect(listed(t, in, tg)).To(Equal([]string{nameAt(now), nameAt(now.Add(-2 * time.Hour)), first}))
		})
	})
}

// An upgrade's backup before its migration, on the target beside the scheduled ones
// (render.PreUpgradeBackupName): listed by the time it began, taken as "latest" while it is the
// newest, restored by its name, and pruned by the scheduled backups' retention (count and days) as
// any other.
func TestDBToolPreUpgradeBackup(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	forEachTarget(t, func(t *testing.T, e suiteEnv, in *dbtoolInstance, tg *dbtoolTarget) {
		g := NewWithT(t)
		in.seed()
		s1, s2 := nameAt(now.Add(-3*time.Hour)), nameAt(now.Add(-2*time.Hour))
		backup(t, in, tg, s1, "RETAIN_COUNT=3")
		in.change("made_after_backup_1")
		backup(t, in, tg, s2, "RETAIN_COUNT=3")
		in.change("made_before_the_upgrade")
		before := in.snapshot()

		pre := render.PreUpgradeBackupName(now.Add(-time.Hour), "0.2.14", "0.2.20")
		r := backup(t, in, tg, pre, "RETAIN_COUNT=3", "TILED_VERSION=0.2.14")
		g.Expect(r["name"]).To(Equal(pre))
		g.Expect(r["tiledVersion"]).To(Equal("0.2.14"))
		checkManifest(t, tg, r)
		g.Expect(r["available"]).To(MatchRegexp(`^%s:\d+,%s:\d+,%s:\d+$`, regexp.QuoteMeta(pre), s2, s1))
		g.Expect(listed(t, in, tg)).To(Equal([]string{pre, s2, s1}))

		// The migration changes the databases, fails: the backup restored by its name, and as latest.
		in.change("made_by_a_failed_migration")
		g.Expect(restore(t, in, tg, pre)).To(HaveKeyWithValue("restored", pre))
		g.Expect(dataDiff(in.snapshot(), before)).To(BeEmpty())
		in.change("made_by_a_failed_migration")
		g.Expect(restore(t, in, tg, "latest")).To(HaveKeyWithValue("restored", pre))
		g.Expect(dataDiff(in.snapshot(), before)).To(BeEmpty())

		// The next scheduled backup comes after it, and the count prunes the oldest, not it.
		backup(t, in, tg, nameAt(now), "RETAIN_COUNT=3")
		g.Expect(listed(t, in, tg)).To(Equal([]string{nameAt(now), pre, s2}))
		g.Expect(tg.entries()).To(ConsistOf(nameAt(now), pre, s2))
		// Two more: it goes by the count as any other.
		backup(t, in, tg, nameAt(now.Add(time.Minute)), "RETAIN_COUNT=3")
		backup(t, in, tg, nameAt(now.Add(2*time.Minute)), "RETAIN_COUNT=3")
		g.Expect(listed(t, in, tg)).To(Equal([]string{nameAt(now.Add(2 * time.Minute)), nameAt(now.Add(time.Minute)), nameAt(now)}))

		// By days: an upgrade's backup 40 days old is pruned, a scheduled one of 3 days kept.
		days := newTarget(t, tg.kind)
		old := render.PreUpgradeBackupName(now.AddDate(0, 0, -40), "0.2.10", "0.2.14")
		d3 := nameAt(now.AddDate(0, 0, -3))
		backup(t, in, days, old)
		backup(t, in, days, d3)
		g.Expect(listed(t, in, days)).To(Equal([]string{d3, old}))
		backup(t, in, days, nameAt(now), "RETAIN_DAYS=7")
		g.Expect(listed(t, in, days)).To(Equal([]string{nameAt(now), d3}))
	})
}

// flip inverts n bytes of b at off.
func flip(b []byte, off, n int) []byte {
	out := append([]byte(nil), b...)
	for i := off; i < off+n && i < len(out); i++ {
		out[i] ^= 0xff
	}
	return out
}

// unreadableDump damages dump so that its table of contents still reads (pg_restore --list) and its
// data does not (pg_restore stops part way, as when it is killed): the first such damage, at the
// start of the data, where what pg_restore wrote before stopping is valid SQL.
func unreadableDump(t *testing.T, dump []byte) []byte {
	t.Helper()
	f := filepath.Join(t.TempDir(), "damaged.dump")
	try := func(off int) []byte {
		d := flip(dump, off, 16)
		if err := os.WriteFile(f, d, 0o644); err != nil {
			t.Fatal(err)
		}
		if exec.Command("pg_restore", "--list", f).Run() != nil {
			return nil
		}
		out, err := exec.Command("pg_restore", "--file", "/dev/null", f).CombinedOutput()
		if err == nil {
			return nil
		}
		t.Logf("damaged at %d of %d bytes: pg_restore --list reads it, pg_restore says: %s", off, len(dump), out)
		return d
	}
	// The same data dumps the same way: the offset found for one case serves the next.
	unreadableMu.Lock()
	off, ok := unreadableAt[len(dump)]
	unreadableMu.Unlock()
	if ok {
		if d := try(off); d != nil {
			return d
		}
	}
	for off := len(dump) / 10; off < len(dump)-16; off += 16 {
		if d := try(off); d != nil {
			unreadableMu.Lock()
			unreadableAt[len(dump)] = off
			unreadableMu.Unlock()
			return d
		}
	}
	t.Fatal("found no damage that pg_restore --list reads and pg_restore does not")
	return nil
}

// unreadableAt remembers unreadableDump's offset by the dump's size (the targets' cases run at once).
var (
	unreadableMu sync.Mutex
	unreadableAt = map[int]int{}
)

// A corrupt backup is refused before any database is touched, with a message naming it; a dump that
// passes its checksums but that pg_restore cannot read to the end leaves its database as it was. A
// backup that does not exist, or none at all, is a clear failure.
func TestDBToolCorruptBackup(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, tg *dbtoolTarget, name string)
		want   []string // in the message, besides the backup's name
	}{
		{"flipped bytes in catalog.dump", func(t *testing.T, tg *dbtoolTarget, name string) {
			d := tg.read(name, "catalog.dump")
			tg.write(name, "catalog.dump", flip(d, len(d)/2, 8))
		}, []string{"is corrupt", "catalog.dump", "nothing was restored"}},
		{"truncated catalog.dump", func(t *testing.T, tg *dbtoolTarget, name string) {
			d := tg.read(name, "catalog.dump")
			tg.write(name, "catalog.dump", d[:len(d)/2])
		}, []string{"is corrupt", "catalog.dump"}},
		{"flipped bytes in auth.dump", func(t *testing.T, tg *dbtoolTarget, name string) {
			d := tg.read(name, "auth.dump")
			tg.write(name, "auth.dump", flip(d, len(d)-40, 4))
		}, []string{"is corrupt", "auth.dump"}},
		{"catalog.dump missing", func(t *testing.T, tg *dbtoolTarget, name string) {
			tg.remove(name, "catalog.dump")
		}, []string{"is corrupt", "catalog.dump"}},
		{"SHA256SUMS missing", func(t *testing.T, tg *dbtoolTarget, name string) {
			tg.remove(name, "SHA256SUMS")
		}, []string{"is corrupt", "SHA256SUMS"}},
		{"catalog.dump unreadable past its table of contents, checksums matching", func(t *testing.T, tg *dbtoolTarget, name string) {
			d := unreadableDump(t, tg.read(name, "catalog.dump"))
			tg.write(name, "catalog.dump", d)
			sum := sha256.Sum256(d)
			sums := regexp.MustCompile(`(?m)^[0-9a-f]{64}  catalog\.dump$`).ReplaceAllString(string(tg.read(name, "SHA256SUMS")),
				hex.EncodeToString(sum[:])+"  catalog.dump")
			tg.write(name, "SHA256SUMS", []byte(sums))
		}, []string{"restoring the catalog database", "left as it was", "pg_restore"}},
	}
	forEachTarget(t, func(t *testing.T, e suiteEnv, in *dbtoolInstance, tg *dbtoolTarget) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				g := NewWithT(t)
				tg := newTarget(t, tg.kind)
				in.seed()
				const name = "20250101T000000Z"
				backup(t, in, tg, name)
				in.change("made_after_the_backup")
				before := in.snapshot()
				c.damage(t, tg, name)
				for _, which := range []string{name, "latest"} {
					msg := dbtool(t, in, tg, "restore", "BACKUP="+which).failed(t)
					g.Expect(msg).To(ContainSubstring("backup "+name), which)
					for _, w := range c.want {
						g.Expect(msg).To(ContainSubstring(w), which)
					}
					g.Expect(dataDiff(in.snapshot(), before)).To(BeEmpty(), "restore %s changed the databases", which)
				}
			})
		}
		t.Run("not found", func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, tg.kind)
			msg := dbtool(t, in, tg, "restore", "BACKUP=latest").failed(t)
			g.Expect(msg).To(ContainSubstring("no whole backup on"))
			g.Expect(msg).To(ContainSubstring("restoreFrom: latest"))
			if tg.kind == "s3" {
				g.Expect(msg).To(ContainSubstring("s3://" + tg.bucket + "/" + tg.prefix))
			} else {
				g.Expect(msg).To(ContainSubstring(tg.root))
			}
			backup(t, in, tg, "20250101T000000Z")
			msg = dbtool(t, in, tg, "restore", "BACKUP=20250102T000000Z").failed(t)
			g.Expect(msg).To(ContainSubstring("backup 20250102T000000Z not found"))
		})
		if tg.kind == "s3" {
			t.Run("wrong credentials", func(t *testing.T) {
				g := NewWithT(t)
				msg := dbtool(t, in, tg, "restore", "BACKUP=latest", "AWS_SECRET_ACCESS_KEY=wrong").failed(t)
				g.Expect(msg).To(ContainSubstring("cannot list s3://" + tg.bucket + "/" + tg.prefix))
			})
		}
	})
}

// RESTORE_IF_EMPTY (a new instance restored from a backup): an empty catalog database is restored;
// one holding tables is kept as it is (whether or not the backup exists), and the report says the
// restore of the backup asked for was skipped.
func TestDBToolRestoreIfEmpty(t *testing.T) {
	forEachTarget(t, func(t *testing.T, e suiteEnv, in *dbtoolInstance, tg *dbtoolTarget) {
		g := NewWithT(t)
		in.seed()
		a := in.snapshot()
		const name = "20250101T000000Z"
		backup(t, in, tg, name, "TILED_VERSION="+expansion.TiledVersion)

		fresh := newInstance(t, e)
		env := []string{"RESTORE_IF_EMPTY=1", "TILED_VERSION=" + expansion.TiledVersion}
		g.Expect(restore(t, fresh, tg, "latest", env...)).To(HaveKeyWithValue("restored", name))
		g.Expect(dataDiff(fresh.snapshot(), a)).To(BeEmpty())

		fresh.change("made_by_the_new_instance")
		kept := fresh.snapshot()
		for _, which := range []string{"latest", name} {
			g.Expect(restore(t, fresh, tg, which, env...)).To(Equal(map[string]any{"skipped": which, "tables": float64(4)}))
			g.Expect(dataDiff(fresh.snapshot(), kept)).To(BeEmpty())
		}
		// Checked before the target is read: kept even where no backup is.
		g.Expect(restore(t, fresh, newTarget(t, tg.kind), "latest", env...)).To(Equal(map[string]any{"skipped": "latest", "tables": float64(4)}))
		g.Expect(dataDiff(fresh.snapshot(), kept)).To(BeEmpty())
		// Without RESTORE_IF_EMPTY the same restore replaces it.
		g.Expect(restore(t, fresh, tg, "latest")).To(HaveKeyWithValue("restored", name))
		g.Expect(dataDiff(fresh.snapshot(), a)).To(BeEmpty())
	})
}

// A backup taken with a newer Tiled than the instance's (TILED_VERSION) is refused, with a message
// naming both versions; the same version, an older one, or one not recorded is restored. Versions
// compare as versions, not as strings.
func TestDBToolTiledVersion(t *testing.T) {
	cases := []struct{ backup, instance string }{
		{"0.2.20", "0.2.14"},
		{"0.2.14", "0.2.9"},
		{"1.0.0", "0.2.20"},
		{"0.2.20", "0.2.20"},
		{"0.2.14", "0.2.20"},
		{"0.2.9", "0.2.14"},
		{"", "0.2.14"},
		{"0.2.20", ""},
	}
	refused := map[[2]string]bool{{"0.2.20", "0.2.14"}: true, {"0.2.14", "0.2.9"}: true, {"1.0.0", "0.2.20"}: true}
	forEachTarget(t, func(t *testing.T, e suiteEnv, in *dbtoolInstance, tg *dbtoolTarget) {
		for _, c := range cases {
			t.Run(fmt.Sprintf("backup %q instance %q", c.backup, c.instance), func(t *testing.T) {
				g := NewWithT(t)
				tg := newTarget(t, tg.kind)
				in.seed()
				a := in.snapshot()
				const name = "20250101T000000Z"
				g.Expect(backup(t, in, tg, name, "TILED_VERSION="+c.backup)).To(HaveKeyWithValue("tiledVersion", c.backup))
				in.change("made_after_the_backup")
				changed := in.snapshot()
				r := dbtool(t, in, tg, "restore", "BACKUP=latest", "TILED_VERSION="+c.instance)
				if refused[[2]string{c.backup, c.instance}] {
					msg := r.failed(t)
					g.Expect(msg).To(ContainSubstring("backup " + name))
					g.Expect(msg).To(ContainSubstring("Tiled " + c.backup + ","))
					g.Expect(msg).To(ContainSubstring("Tiled " + c.instance + ":"))
					g.Expect(dataDiff(in.snapshot(), changed)).To(BeEmpty())
					return
				}
				g.Expect(reportJSON(t, r.ok(t))).To(And(HaveKeyWithValue("restored", name), HaveKeyWithValue("tiledVersion", c.backup)))
				g.Expect(dataDiff(in.snapshot(), a)).To(BeEmpty())
			})
		}
	})
}

// putMany uploads data to every key in one curl process (a config file of URLs), through the S3 API.
func (s s3Server) putMany(t *testing.T, bucket string, keys []string, data []byte) {
	t.Helper()
	dir := t.TempDir()
	body := filepath.Join(dir, "body")
	if err := os.WriteFile(body, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var cfg strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&cfg, "url = \"%s/%s\"\nupload-file = \"%s\"\noutput = \"/dev/null\"\n", strings.TrimSuffix(s.endpoint, "/"), objectPath(bucket, k), body)
	}
	cf := filepath.Join(dir, "curl.cfg")
	if err := os.WriteFile(cf, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("curl", "--silent", "--show-error", "--fail", "--aws-sigv4", "aws:amz:us-east-1:s3",
		"--user", s.access+":"+s.secret, "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "--config", cf)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("uploading %d keys: %v\n%s", len(keys), err, out)
	}
}

// The S3 target's listing spans pages (ListObjectsV2 answers at most MaxKeys keys, 1,000 on
// versitygw as on AWS): keys sorting before the backups (one level deeper, so neither backups nor
// partial ones) fill the first page but for the oldest backup's first three keys, so that its
// manifest begins the second page and its dumps are on both. Listing, "latest", the report's sizes
// and pruning all follow the continuation token, and lose no key at a page's end.
func TestDBToolS3ListingPages(t *testing.T) {
	t.Parallel()
	e := getEnv(t)
	g := NewWithT(t)
	in := newInstance(t, e)
	tg := newTarget(t, "s3")
	in.seed()
	const b1, b2, b3 = "20250101T000000Z", "20250102T000000Z", "20250103T000000Z"
	bytes1 := checkManifest(t, tg, backup(t, in, tg, b1))
	in.change("made_after_backup_1")
	a := in.snapshot()
	bytes2 := checkManifest(t, tg, backup(t, in, tg, b2))

	p := tg.s3.listPage(t, tg.bucket, tg.prefix+"/", "")
	g.Expect(p.IsTruncated).To(BeFalse())
	g.Expect(p.KeyCount).To(Equal(10))
	pageSize := p.MaxKeys
	t.Logf("the S3 server lists %d keys a page", pageSize)
	g.Expect(pageSize).To(BeNumerically(">", 10))
	filler := make([]string, pageSize-3)
	for i := range filler {
		filler[i] = fmt.Sprintf("%s/0-filler/x/%05d", tg.prefix, i)
	}
	tg.s3.putMany(t, tg.bucket, filler, []byte("x"))

	// The pages are as intended: b1's SHA256SUMS, auth.dump and catalog.dump end the first; its
	// manifest and storage.dump begin the second.
	p = tg.s3.listPage(t, tg.bucket, tg.prefix+"/", "")
	g.Expect(p.IsTruncated).To(BeTrue())
	g.Expect(p.Contents).To(HaveLen(pageSize))
	g.Expect(p.Contents[pageSize-3].Key).To(Equal(tg.prefix + "/" + b1 + "/SHA256SUMS"))
	g.Expect(p.Contents[pageSize-1].Key).To(Equal(tg.prefix + "/" + b1 + "/catalog.dump"))
	p2 := tg.s3.listPage(t, tg.bucket, tg.prefix+"/", p.NextContinuationToken)
	g.Expect(p2.IsTruncated).To(BeFalse())
	g.Expect(p2.Contents[0].Key).To(Equal(tg.prefix + "/" + b1 + "/manifest.json"))
	g.Expect(p2.Contents[1].Key).To(Equal(tg.prefix + "/" + b1 + "/storage.dump"))

	g.Expect(list(t, in, tg)).To(Equal([]string{fmt.Sprintf("%s %d", b2, bytes2), fmt.Sprintf("%s %d", b1, bytes1)}))
	in.change("made_after_backup_2")
	g.Expect(restore(t, in, tg, "latest")).To(HaveKeyWithValue("restored", b2))
	g.Expect(dataDiff(in.snapshot(), a)).To(BeEmpty())

	// Pruning removes b1 whole: its keys on the first page too.
	r := backup(t, in, tg, b3, "RETAIN_COUNT=2")
	bytes3 := checkManifest(t, tg, r)
	g.Expect(r["available"]).To(Equal(fmt.Sprintf("%s:%d,%s:%d", b3, bytes3, b2, bytes2)))
	keys := tg.s3.keys(t, tg.bucket, tg.prefix+"/")
	g.Expect(keys).To(HaveLen(len(filler) + 10))
	for k := range keys {
		g.Expect(k).NotTo(HavePrefix(tg.prefix+"/"+b1+"/"), "pruned backup %s left %s", b1, k)
	}
}

// runRendered runs a rendered backup or restore container on this machine as its Job would: its
// command and its environment as the kubelet resolves them (Secret keys from the deployment's
// Secrets), as the Jobs' user, with only WORK and HOME (in the Job's /tmp, an emptyDir) pointed at a
// scratch directory.
// What it prints goes to the deployment's log too, where no secret may appear.
func (d *deployment) runRendered(c *corev1ac.ContainerApplyConfiguration) dbtoolRun {
	d.t.Helper()
	args := d.command(c)
	tmp := scratch(d.t) // the Job's /tmp
	env := []string{"WORK=" + filepath.Join(tmp, "dbtool"), "HOME=" + tmp}
	for _, kv := range d.env(c) {
		if !strings.HasPrefix(kv, "WORK=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.lookPath(args[0]), args[1:]...)
	cmd.Env = env
	if asJobUser() {
		id := uint32(render.RunAsUser)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id, Gid: id}}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = d.tee(&stdout), d.tee(&stderr)
	err := cmd.Run()
	r := dbtoolRun{mode: args[len(args)-1], stdout: stdout.String(), stderr: stderr.String(), err: err}
	d.t.Logf("%s (%v):\n%s%s", strings.Join(args[len(args)-2:], " "), err, r.stderr, r.stdout)
	return r
}

// A real Tiled instance's databases, backed up by the rendered backup CronJob's container to an S3
// target, then lost (recreated empty, the data volume kept), and restored by the rendered bootstrap
// Job: the init container finds the catalog at its revision (no new tables), and Tiled serves what
// was written before the backup (arrays and tables, and the appendable table's rows in the storage
// database). A second run of the bootstrap Job leaves the now non-empty catalog alone.
func TestDBToolTiledBackupAndBootstrap(t *testing.T) {
	t.Parallel()
	e := ownPostgres(t)
	g := NewWithT(t)
	s3 := getS3(t)
	bucket := "dbtool-tiled-" + randomHex(t, 4)
	_, err := s3.curl(bucket, "-X", "PUT")
	g.Expect(err).NotTo(HaveOccurred())

	ti := instance("backups")
	ti.Spec.Backup = &v1alpha1.BackupSpec{S3: &v1alpha1.BackupS3Target{
		Endpoint: s3.endpoint, Bucket: bucket, CredentialsSecret: v1alpha1.LocalObjectReference{Name: "s3-backup"},
	}}
	d := deploy(t, e, ti, render.Inputs{}, map[string]map[string][]byte{"s3-backup": {
		render.S3KeyAccessKeyID: []byte(s3.access), render.S3KeySecretAccessKey: []byte(s3.secret),
	}})
	password := string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword])
	e.provisionManaged(t, password)
	d.runInit()
	s := d.mustStart()
	d.python("write", s.url)
	s.stop()
	revision := e.query(t, "catalog", "SELECT version_num FROM alembic_version")

	// As the operator renders them (the database address is this machine's).
	in := render.Inputs{SecretData: d.secrets[d.objs.Names.Secret], DatabaseAddress: e.pg}
	cj, err := render.BackupCronJob(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	r := reportJSON(t, d.runRendered(&cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]).ok(t))
	name, _ := r["name"].(string)
	g.Expect(name).To(MatchRegexp(`^\d{8}T\d{6}Z$`))
	g.Expect(r["revisions"]).To(HaveKeyWithValue("catalog", revision))
	g.Expect(r["tiledVersion"]).To(Equal(expansion.TiledVersion))
	g.Expect(r["instance"]).To(Equal(ti.Namespace + "/" + ti.Name))
	g.Expect(r["available"]).To(HavePrefix(name + ":"))

	// The databases are lost: a new instance's, empty.
	e.provisionManaged(t, password)
	in.Lifecycle = &render.Lifecycle{Step: &render.Step{Kind: render.StepBootstrap, Backup: "latest", FromVersion: expansion.TiledVersion}}
	job, err := render.LifecycleJob(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	bootstrap := &job.Spec.Template.Spec.Containers[0]
	g.Expect(reportJSON(t, d.runRendered(bootstrap).ok(t))).To(HaveKeyWithValue("restored", name))
	g.Expect(e.query(t, "catalog", "SELECT version_num FROM alembic_version")).To(Equal(revision))

	g.Expect(d.runInit()).NotTo(ContainSubstring("is new. Creating tables"))
	s = d.mustStart()
	d.python("read", s.url)
	s.stop()

	again := reportJSON(t, d.runRendered(bootstrap).ok(t))
	g.Expect(again).To(HaveKeyWithValue("skipped", "latest"))
}

// flakyS3 is a TCP proxy on loopback in front of the suite's S3 server that closes its first `drop`
// connections at once, unanswered (curl: "Empty reply from server", exit 52: not one curl tries
// again by itself), as a Service whose endpoints, or a network policy's rules, are not ready yet
// would. drop < 0 closes every connection. It returns the endpoint to give dbtool.sh and a count
// of the connections it took.
func flakyS3(t *testing.T, s s3Server, drop int) (endpoint string, conns func() int) {
	t.Helper()
	u, err := url.Parse(s.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			closeIt := drop < 0 || n <= drop
			mu.Unlock()
			if closeIt {
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return "http://" + l.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// An S3 endpoint that does not answer is not a corrupt or a missing backup: dbtool.sh tries again
// (S3_ATTEMPTS, S3_RETRY_SECONDS) and, still unanswered, exits with render.ExitTryAgain before it
// has changed anything, saying so (the Jobs' pod failure policy then runs another pod). An endpoint
// that answers after a few such connections restores and backs up as ever.
func TestDBToolS3Unanswered(t *testing.T) {
	t.Parallel()
	e := getEnv(t)
	in := newInstance(t, e)
	tg := newTarget(t, "s3")
	in.seed()
	const name = "20250101T000000Z"
	backup(t, in, tg, name)
	in.change("made_after_the_backup")
	before := in.snapshot()
	quick := []string{"S3_ATTEMPTS=3", "S3_RETRY_SECONDS=1"}

	t.Run("never answers", func(t *testing.T) {
		g := NewWithT(t)
		endpoint, conns := flakyS3(t, tg.s3, -1)
		for _, c := range []struct{ mode, backup string }{{"restore", name}, {"restore", "latest"}, {"backup", ""}} {
			env := append([]string{"S3_ENDPOINT=" + endpoint, "BACKUP=" + c.backup}, quick...)
			was := conns()
			r := dbtool(t, in, tg, c.mode, env...)
			msg := r.failed(t)
			var exit *exec.ExitError
			g.Expect(errors.As(r.err, &exit)).To(BeTrue(), "%v", r.err)
			g.Expect(exit.ExitCode()).To(Equal(render.ExitTryAgain), "%s %s: %s", c.mode, c.backup, msg)
			g.Expect(msg).To(HavePrefix("s3://" + tg.bucket + "/" + tg.prefix + " at " + endpoint + " did not answer (curl exit "))
			g.Expect(msg).To(MatchRegexp(`did not answer \(curl exit (52|56): curl: \((52|56)\) [^\n]*\): `), "the last attempt's error, one line")
			g.Expect(msg).To(ContainSubstring("run again"))
			g.Expect(msg).NotTo(ContainSubstring("corrupt"))
			g.Expect(msg).NotTo(ContainSubstring("not found"))
			g.Expect(r.stderr).To(ContainSubstring("trying again in 2 s"), "tried again, waiting longer each time")
			g.Expect(conns()-was).To(BeNumerically(">=", 3), "S3_ATTEMPTS requests at least")
			g.Expect(dataDiff(in.snapshot(), before)).To(BeEmpty(), "%s changed the databases", c.mode)
		}
		g.Expect(tg.entries()).To(Equal([]string{name}), "the backup that could not be written left nothing")
	})

	t.Run("answers after two connections", func(t *testing.T) {
		g := NewWithT(t)
		endpoint, conns := flakyS3(t, tg.s3, 2)
		r := restore(t, in, tg, name, append([]string{"S3_ENDPOINT=" + endpoint}, quick...)...)
		g.Expect(r).To(HaveKeyWithValue("restored", name))
		g.Expect(dataDiff(in.snapshot(), before)).NotTo(BeEmpty(), "restored")
		g.Expect(in.snapshot()["catalog tables"]).NotTo(ContainSubstring("made_after_the_backup"))
		g.Expect(conns()).To(BeNumerically(">", 2))

		endpoint, _ = flakyS3(t, tg.s3, 2)
		b := backup(t, in, tg, "20250102T000000Z", append([]string{"S3_ENDPOINT=" + endpoint}, quick...)...)
		checkManifest(t, tg, b)
	})
}

// The databases are dumped at once: one that cannot be dumped (its database gone while the
// server answers) fails the backup with pg_dump's reason, naming it, and leaves no whole backup;
// the others' dumps are not taken for a backup. The checksums written while dumping are the
// files' own (checkManifest, every case).
func TestDBToolDumpFails(t *testing.T) {
	forEachTarget(t, func(t *testing.T, e suiteEnv, in *dbtoolInstance, tg *dbtoolTarget) {
		g := NewWithT(t)
		in.seed()
		const name = "20250101T000000Z"
		storage := in.dbs["storage"]
		msg := dbtool(t, in, tg, "backup", "BACKUP="+name,
			"DUMP_STORAGE_URI=postgresql://"+in.e.pg+"/"+storage.name+"_gone").failed(t)
		g.Expect(msg).To(HavePrefix("pg_dump of the storage database failed: "))
		g.Expect(msg).To(ContainSubstring(storage.name + "_gone"))
		g.Expect(list(t, in, tg)).To(BeEmpty(), "no whole backup")
		r := dbtool(t, in, tg, "restore", "BACKUP="+name)
		g.Expect(r.failed(t)).To(ContainSubstring("backup " + name + " not found"))

		// Whole once the database is back: the same name, every file's checksum its own.
		checkManifest(t, tg, backup(t, in, tg, name))
		g.Expect(list(t, in, tg)).To(HaveLen(1))
	})
}

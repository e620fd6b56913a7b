package contents

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"

	"github.com/aws/smithy-go"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"
)

// DefaultCacheBytes bounds the clean-block cache a Store gives the files
// that bring no cache of their own.
const DefaultCacheBytes = 256 << 20

// DefaultDirtyBytes bounds the dirty (not yet uploaded) block memory of all
// the files of a Store that bring no Budget of their own.
const DefaultDirtyBytes = 512 << 20

// deleteParallel is how many objects Delete removes at once.
const deleteParallel = 8

// ErrNotFound is wrapped by the errors of operations on a missing object.
var ErrNotFound = errors.New("contents: object not found")

// ErrClosed is returned by the operations of a closed File.
var ErrClosed = errors.New("contents: file closed")

// Store is the object store that holds file contents. Its methods are safe
// for concurrent use.
type Store struct {
	bucket *blob.Bucket
	where  string // the URL without its query, for error messages
	wopts  *blob.WriterOptions
	pool   *bufPool
	cache  *BlockCache
	budget *Budget
}

// Open opens the object store at rawURL, one of
//
//	file:///DIR        (a directory, created if missing)
//	s3://BUCKET?endpoint=http://HOST:PORT&use_path_style=true&disable_https=true&region=us-east-1
//
// S3 credentials come from the AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
// environment variables (or the SDK's other usual sources). Both schemes
// also take prefix=P/ to keep every key under P/. Open does not contact the
// store: Check does.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("contents: store URL: %w", err)
	}
	where := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	mux := new(blob.URLMux)
	switch u.Scheme {
	case fileblob.Scheme:
		// Temporary files next to their object (a rename never crosses file
		// systems) and no metadata sidecar files: keys are all we need.
		mux.RegisterBucket(fileblob.Scheme, &fileblob.URLOpener{Options: fileblob.Options{
			CreateDir: true, NoTempDir: true, Metadata: fileblob.MetadataDontWrite,
		}})
	case s3blob.Scheme:
		mux.RegisterBucket(s3blob.Scheme, &s3blob.URLOpener{})
	default:
		return nil, fmt.Errorf("contents: store URL %q: scheme %q is not file or s3", where, u.Scheme)
	}
	b, err := mux.OpenBucketURL(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("contents: open store %s: %w", where, err)
	}
	pool := &bufPool{}
	return &Store{
		bucket: b,
		where:  where,
		wopts:  &blob.WriterOptions{ContentType: "application/octet-stream"},
		pool:   pool,
		cache:  NewBlockCache(DefaultCacheBytes),
		budget: NewBudget(DefaultDirtyBytes),
	}, nil
}

// String returns the store's URL without its query.
func (s *Store) String() string { return s.where }

// Close closes the store. The files opened on it must be closed first.
func (s *Store) Close() error {
	if err := s.bucket.Close(); err != nil {
		return fmt.Errorf("contents: close store %s: %w", s.where, err)
	}
	return nil
}

// wrap turns an error of the blob layer on key into one of this package,
// wrapping ErrNotFound for a missing object.
func wrap(op, key string, err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("contents: %s %s: %w: %w", op, key, ErrNotFound, err)
	}
	return fmt.Errorf("contents: %s %s: %w", op, key, err)
}

// Put stores data as the object of block r of inode ino. Objects are
// immutable: callers never Put the same (ino, r) twice.
func (s *Store) Put(ctx context.Context, ino uint64, r BlockRef, data []byte) error {
	key := Key(ino, r)
	if err := s.bucket.Upload(ctx, key, bytes.NewReader(data), s.wopts); err != nil {
		return wrap("put", key, err)
	}
	return nil
}

// Get reads the object of block r of inode ino from offset off into p, as
// io.ReaderAt does: it returns io.EOF (unwrapped) with n < len(p) when the
// object ends first, and an error wrapping ErrNotFound when the object does
// not exist.
func (s *Store) Get(ctx context.Context, ino uint64, r BlockRef, off int64, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	key := Key(ino, r)
	rd, err := s.bucket.NewRangeReader(ctx, key, off, int64(len(p)), nil)
	if err != nil {
		if off > 0 && invalidRange(err) {
			return 0, io.EOF // off is at or past the object's end
		}
		return 0, wrap("get", key, err)
	}
	n, err := io.ReadFull(rd, p)
	if cerr := rd.Close(); err == nil && cerr != nil {
		err = cerr
	}
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return n, io.EOF
	default:
		return n, wrap("get", key, err)
	}
}

// invalidRange reports an S3 answer to a range that starts past the end of
// the object.
func invalidRange(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "InvalidRange"
}

// Delete removes the objects refs of inode ino. A missing object is not an
// error: deletes are idempotent. It returns every failure, joined.
func (s *Store) Delete(ctx context.Context, ino uint64, refs []BlockRef) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		next = make(chan BlockRef)
	)
	workers := min(deleteParallel, len(refs))
	for range workers {
		wg.Go(func() {
			for r := range next {
				key := Key(ino, r)
				if err := s.bucket.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
					mu.Lock()
					errs = append(errs, wrap("delete", key, err))
					mu.Unlock()
				}
			}
		})
	}
feed:
	for _, r := range refs {
		select {
		case next <- r:
		case <-ctx.Done():
			mu.Lock()
			errs = append(errs, fmt.Errorf("contents: delete: %w", ctx.Err()))
			mu.Unlock()
			break feed
		}
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// listRetries bounds the restarts of a listing that a concurrent upload or
// delete disturbed (fileblob fails a listing when a file goes meanwhile).
const listRetries = 5

// Objects lists the objects the store holds for inode ino, in no
// particular order. Keys under the inode's prefix that ParseKey refuses
// (such as fileblob's temporary files) are skipped.
func (s *Store) Objects(ctx context.Context, ino uint64) ([]BlockRef, error) {
	for attempt := 1; ; attempt++ {
		refs, err := s.objects(ctx, ino)
		if err == nil || attempt == listRetries || gcerrors.Code(err) != gcerrors.NotFound {
			return refs, err
		}
	}
}

func (s *Store) objects(ctx context.Context, ino uint64) ([]BlockRef, error) {
	it := s.bucket.List(&blob.ListOptions{Prefix: InodePrefix(ino)})
	var refs []BlockRef
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return refs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("contents: list %s: %w", InodePrefix(ino), err)
		}
		if i, r, err := ParseKey(obj.Key); err == nil && i == ino {
			refs = append(refs, r)
		}
	}
}

// Check writes a probe object, reads it back and deletes it. Its error says
// which step failed, names the store and wraps the cause: one line that
// tells why the store is unusable.
func (s *Store) Check(ctx context.Context) error {
	var id [8]byte
	_, _ = crand.Read(id[:])
	key := "check/" + hex.EncodeToString(id[:])
	probe := []byte("ghba contents probe " + key)
	fail := func(step string, err error) error {
		return fmt.Errorf("contents: store %s: %s probe object %s: %w", s.where, step, key, err)
	}
	if err := s.bucket.WriteAll(ctx, key, probe, s.wopts); err != nil {
		return fail("write", err)
	}
	got, err := s.bucket.ReadAll(ctx, key)
	if err != nil {
		return fail("read back", err)
	}
	if !bytes.Equal(got, probe) {
		return fail("read back", fmt.Errorf("got %d bytes that differ from the %d written", len(got), len(probe)))
	}
	if err := s.bucket.Delete(ctx, key); err != nil {
		return fail("delete", err)
	}
	return nil
}

package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"
)

// Backup format (Backup, Restore): a header, Badger's own backup stream
// (DB.Backup's format: length-prefixed protobuf lists of keys and values)
// cut into checksummed chunks, and a trailer that proves the stream
// complete:
//
//	header   magic "ghba-store-backup\n" v=1:u8
//	chunk    len:u32be (1..maxBackupChunk) bytes[len] crc:u32be   (repeated)
//	end      0:u32be applied:u64be keys:u64be crc:u32be
//
// A chunk's crc is the CRC-32C of its bytes, checked before any of them is
// loaded; the end's is the CRC-32C of every chunk's bytes in order, then
// applied and keys. applied is the applied index the copy holds, keys the
// number of live keys in it. Restore rejects a wrong header before it
// touches the store, and after loading checks the key count and the
// applied index.
const (
	backupMagic     = "ghba-store-backup\n"
	backupFormatV1  = 1
	maxBackupChunk  = 1 << 20
	backupTrailer   = 8 + 8 + 4
	restoreLoadPend = 16 // Badger Load's concurrent writes
)

// restoreMarker is the file, in the Badger directory, that exists while a
// Restore has dropped the store's contents and not finished loading.
const restoreMarker = "RESTORE-INCOMPLETE"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Backup writes a consistent point-in-time copy of every key of the store
// to w (Badger's Stream backup, read from one transaction) and returns the
// applied index (see ApplyLog) that the copy holds. Writers go on while it
// runs; the copy holds exactly the transactions committed before it began,
// so its applied index is at least the one AppliedIndex reported before the
// call. Restore loads it. w may be written to in several calls; an error
// from w or ctx stops the backup.
func (s *Store) Backup(ctx context.Context, w io.Writer) (appliedIndex uint64, err error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	if _, err := w.Write(append([]byte(backupMagic), backupFormatV1)); err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	cw := &chunkWriter{ctx: ctx, w: w, crc: crc32.New(castagnoli), buf: make([]byte, 4, 4+maxBackupChunk)}
	stream := s.db.NewStream()
	stream.LogPrefix = "store.Backup"
	stream.NumGo = 1 // one producer, so one read transaction: one point in time
	var keys uint64
	var applied uint64
	var appliedErr error
	stream.ChooseKey = func(item *badger.Item) bool { // called serially (NumGo 1)
		if item.IsDeletedOrExpired() {
			return false // a full copy needs no tombstones
		}
		keys++
		if bytes.Equal(item.Key(), sysAppliedKey) {
			appliedErr = item.Value(func(v []byte) (err error) { applied, err = decodeApplied(v); return err })
		}
		return true
	}
	if _, err := stream.Backup(cw, 0); err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	if appliedErr != nil {
		return 0, fmt.Errorf("store: backup: %w", appliedErr)
	}
	if err := cw.close(applied, keys); err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	s.log.Info("backup written", "applied", applied, "keys", keys)
	return applied, nil
}

// chunkWriter cuts what it is given into chunks and ends them with the
// trailer.
type chunkWriter struct {
	ctx context.Context
	w   io.Writer
	crc hash.Hash32 // of everything
	buf []byte      // 4 bytes for the length, then the chunk
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), 4+maxBackupChunk-len(c.buf))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
		if len(c.buf) == 4+maxBackupChunk {
			if err := c.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (c *chunkWriter) flush() error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	if len(c.buf) == 4 {
		return nil
	}
	data := c.buf[4:]
	binary.BigEndian.PutUint32(c.buf, uint32(len(data)))
	c.crc.Write(data)
	c.buf = binary.BigEndian.AppendUint32(c.buf, crc32.Checksum(data, castagnoli))
	if _, err := c.w.Write(c.buf); err != nil {
		return err
	}
	c.buf = c.buf[:4]
	return nil
}

func (c *chunkWriter) close(applied, keys uint64) error {
	if err := c.flush(); err != nil {
		return err
	}
	end := binary.BigEndian.AppendUint32(c.buf[:0], 0)
	end = binary.BigEndian.AppendUint64(end, applied)
	end = binary.BigEndian.AppendUint64(end, keys)
	c.crc.Write(end[4:])
	end = binary.BigEndian.AppendUint32(end, c.crc.Sum32())
	_, err := c.w.Write(end)
	return err
}

// chunkReader returns the Badger stream of a backup, one verified chunk at
// a time, and io.EOF at its end once the trailer checked out.
type chunkReader struct {
	ctx  context.Context
	r    io.Reader
	crc  hash.Hash32 // of everything
	buf  []byte      // the current chunk
	off  int         // bytes of buf already returned
	done bool

	applied, keys uint64 // from the trailer
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.done {
		return 0, io.EOF
	}
	if c.off == len(c.buf) {
		if err := c.next(); err != nil {
			return 0, err
		}
		if c.done {
			return 0, io.EOF
		}
	}
	n := copy(p, c.buf[c.off:])
	c.off += n
	return n, nil
}

// next reads and checks the next chunk, or the trailer.
func (c *chunkReader) next() error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	var h [4]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return truncated(err)
	}
	n := int(binary.BigEndian.Uint32(h[:]))
	if n > maxBackupChunk {
		return corruptf("backup chunk of %d bytes", n)
	}
	if n == 0 {
		return c.trailer()
	}
	if cap(c.buf) < n+4 {
		c.buf = make([]byte, 0, maxBackupChunk+4)
	}
	c.buf = c.buf[:n+4]
	if _, err := io.ReadFull(c.r, c.buf); err != nil {
		return truncated(err)
	}
	sum := binary.BigEndian.Uint32(c.buf[n:])
	c.buf, c.off = c.buf[:n], 0
	if sum != crc32.Checksum(c.buf, castagnoli) {
		return corruptf("backup chunk checksum mismatch")
	}
	c.crc.Write(c.buf)
	return nil
}

func (c *chunkReader) trailer() error {
	var t [backupTrailer]byte
	if _, err := io.ReadFull(c.r, t[:]); err != nil {
		return truncated(err)
	}
	c.crc.Write(t[:16])
	if sum := binary.BigEndian.Uint32(t[16:]); sum != c.crc.Sum32() {
		return corruptf("backup checksum mismatch")
	}
	c.applied = binary.BigEndian.Uint64(t[0:])
	c.keys = binary.BigEndian.Uint64(t[8:])
	c.done = true
	return nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corruptf("backup truncated")
	}
	return err
}

// Restore replaces the whole contents of the store with a backup written by
// Backup, and re-reads the inode counts and the applied index from it.
// Nothing else may run meanwhile: calls that arrive during a Restore fail
// with ErrRestoring, and Restore first waits for those in progress (or
// until ctx is done). A backup with a wrong header is refused before the
// store is touched. Any later failure (a damaged or truncated backup, a
// disk error, ctx done) leaves the store broken rather than half restored:
// every call but Restore and Close then fails with an error wrapping
// ErrRestoreIncomplete, also after reopening, until a Restore succeeds. A
// backup taken during a rekey holds its rekey record: call ResumeRekey
// after Restore, as after Open.
func (s *Store) Restore(ctx context.Context, r io.Reader) error {
	hdr := make([]byte, len(backupMagic)+1)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return fmt.Errorf("store: restore: header: %w", truncated(err))
	}
	if string(hdr[:len(backupMagic)]) != backupMagic {
		return fmt.Errorf("store: restore: %w", corruptf("not a store backup"))
	}
	if v := hdr[len(backupMagic)]; v != backupFormatV1 {
		return fmt.Errorf("store: restore: %w: backup format %d", ErrUnknownVersion, v)
	}
	if err := s.gate.beginRestore(ctx); err != nil {
		return err
	}
	err := s.restore(ctx, r)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrRestoreIncomplete, err)
		s.log.Error("restore failed: the store refuses every call until a Restore succeeds", "err", err)
	}
	s.gate.endRestore(err)
	return err
}

// restore does the work of Restore once it has the store to itself.
func (s *Store) restore(ctx context.Context, r io.Reader) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := setRestoreMarker(s.dir, true); err != nil {
		return err
	}
	s.rekeys.set(nil) // loaded again below, or at next use
	if err := s.db.DropAll(); err != nil {
		return fmt.Errorf("drop: %w", err)
	}
	cr := &chunkReader{ctx: ctx, r: r, crc: crc32.New(castagnoli)}
	if err := s.db.Load(cr, restoreLoadPend); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if !cr.done {
		return corruptf("backup ended without its trailer")
	}
	var counts InodeCounts
	var applied uint64
	var rekeys map[string]rekeyEntry
	err := s.db.Update(func(txn *badger.Txn) error {
		if err := checkSchema(txn); err != nil {
			return err
		}
		keys, c, err := countKeys(ctx, txn)
		if err != nil {
			return err
		}
		if keys != cr.keys {
			return corruptf("backup holds %d keys, %d loaded", cr.keys, keys)
		}
		if applied, err = readApplied(txn); err != nil {
			return err
		}
		if applied != cr.applied {
			return corruptf("backup of applied index %d holds %d", cr.applied, applied)
		}
		counts = c
		rekeys = loadRekeys(txn)
		return txn.Set(sysCountsKey, encodeCounts(c))
	})
	if err != nil {
		return err
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := setRestoreMarker(s.dir, false); err != nil {
		return err
	}
	s.countsMu.Lock()
	s.counts, s.applied = counts, applied
	s.countsMu.Unlock()
	s.rekeys.set(rekeys)
	s.log.Info("store restored", "applied", applied, "keys", cr.keys, "files", counts.Files, "dirs", counts.Dirs)
	return nil
}

// checkSchema checks the schema record of a restored store.
func checkSchema(txn *badger.Txn) error {
	item, err := txn.Get(sysSchemaKey)
	if err != nil {
		return fmt.Errorf("schema record: %w", err)
	}
	return item.Value(func(b []byte) error {
		v, err := decodeSchema(b)
		if err == nil && v != schemaVersion {
			err = fmt.Errorf("backup schema version %d, this build supports %d", v, schemaVersion)
		}
		return err
	})
}

// countKeys counts the live keys and, by type, the inodes.
func countKeys(ctx context.Context, txn *badger.Txn) (uint64, InodeCounts, error) {
	var keys uint64
	it := txn.NewIterator(badger.IteratorOptions{})
	for it.Rewind(); it.Valid(); it.Next() {
		if keys++; keys%4096 == 0 {
			if err := ctx.Err(); err != nil {
				it.Close()
				return 0, InodeCounts{}, err
			}
		}
	}
	it.Close()
	c, err := countInodes(ctx, txn)
	return keys, c, err
}

// setRestoreMarker creates (on) or removes the restore marker file, and
// syncs the directory so that the change survives a crash.
func setRestoreMarker(dir string, on bool) error {
	p := filepath.Join(dir, restoreMarker)
	if on {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		_, err = f.WriteString("a Restore of this store did not complete; restore it again\n")
		if serr := f.Sync(); err == nil {
			err = serr
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("restore marker: %w", err)
		}
	} else if err := os.Remove(p); err != nil {
		return fmt.Errorf("restore marker: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("restore marker: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("restore marker: sync %s: %w", dir, err)
	}
	return nil
}

// restoreMarked reports whether the store in dir is left from a Restore
// that did not finish.
func restoreMarked(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, restoreMarker))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("store: open %s: %w", dir, err)
	}
	return true, nil
}

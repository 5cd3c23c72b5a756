package buffer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/internal/dirlock"
)

// On-disk format (all integers little-endian). See README.md.
//
//	<dir>/LOCK                  flock'd while a process uses the queue
//	<dir>/cursor                committed read position (replaced by rename)
//	<dir>/<id:020d>.seg         segments, ids increasing, oldest first
//
//	segment = "GSBQSEG2" | hlen:u32 | hcrc:u32 (CRC32C of header) |
//	          header (hlen bytes: records.BufferSegment) | record*
//	record  = magic:u32 "GSBF" | length:u32 | time:i64 (append, Unix ns) |
//	          records:u32 | crc:u32 (CRC32C of bytes 4..20 ‖ payload) | payload
//	cursor  = "GSBC" | version:u32 | flags:u32 (1: first is set) |
//	          first seg:u64 off:u64 | head seg:u64 off:u64 | crc:u32
const (
	segMagic        = "GSBQSEG2"
	segMagicV1      = "GSBQSEG1"
	segHeaderSize   = int64(len(segMagic)) + 8 // magic, hlen, hcrc; the header follows
	segExt          = ".seg"
	frameHeaderSize = 24
	frameMagic      = "GSBF"
	cursorMagic     = "GSBC"
	cursorVersion   = 2
	cursorSize      = 4 + 4 + 4 + 16 + 16 + 4 // version 1; version 2 adds a table after head
	cursorName      = "cursor"
	cursorTmpName   = "cursor.tmp"
	lockName        = "LOCK"

	minSegmentBytes     = 16 << 10
	maxSegmentBytes     = 16 << 20
	maxFramePayloadSize = 1<<31 - 1

	// blockSize is the allocation unit the disk budget counts files in:
	// a file of n bytes uses n rounded up to it (du's view on ext4, xfs
	// and tmpfs).
	blockSize = 4096
	// reserveBlocks of the budget are kept for what is not a segment: the
	// cursor, cursor.tmp while a commit replaces it, and the directory.
	reserveBlocks = 3
	// reclaimBytes: once every record of the active segment was delivered,
	// a segment holding at least this much is closed and removed, so that
	// a sink that keeps up needs about this much disk, whatever the
	// segment size.
	reclaimBytes = 64 << 10
	// retryDiskEvery: how often a degraded queue (one whose disk write
	// failed) tries the disk again, by the push's clock.
	retryDiskEvery = int64(time.Second)
	// maxCollisions bounds how many taken names roll skips (a file planted
	// under the next segment's name) before it gives up.
	maxCollisions = 64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// diskOptions configure a diskQueue.
type diskOptions struct {
	maxBytes   int64
	maxRecords int
	// diskBytes bounds what the queue's files use on disk (block-rounded
	// segment files plus reserveBlocks); 0: unbounded (the queue is then
	// bounded by maxBytes and maxRecords alone, plus the segment overhead).
	diskBytes    int64
	segmentBytes int64
	// header is the segment header (an encoded records.BufferSegment)
	// written at the start of every new segment until setHeader replaces
	// it.
	header []byte
	log    *slog.Logger
	hooks  diskHooks
	// shared names files in the directory that another writer keeps
	// (the aggregate journal): the budget counts each at its size when
	// a record is appended.
	shared []string
}

// diskHooks let the crash tests stop the process at named points of the
// crash-safety order. Nil in production.
type diskHooks struct {
	// crash is called at each named point.
	crash func(point string)
	// tear, when it returns true, makes the append write half its record
	// and then call crash("append.torn").
	tear func() bool
	// committed is called after each cursor commit (model test).
	committed func()
	// noAckCommit leaves the cursor to the syncs, as before acknowledgements
	// wrote it (the baseline of BenchmarkBuffer's disk-ack-commit ratio).
	noAckCommit bool
	// writeErr, when set, is asked before each segment create and record
	// write; an error it returns is taken as that write's failure (a
	// full disk without a small filesystem to fill).
	writeErr func(op string) error
}

func (h diskHooks) fail(op string) error {
	if h.writeErr != nil {
		return h.writeErr(op)
	}
	return nil
}

func (h diskHooks) at(point string) {
	if h.crash != nil {
		h.crash(point)
	}
}

// frameInfo indexes one valid record of a segment.
type frameInfo struct {
	off     int64
	size    uint32 // payload bytes
	records uint32
	timeNS  int64
}

func (f frameInfo) total() int64 { return frameHeaderSize + int64(f.size) }

// segment is one segment file. frames[:read] have been taken (delivered,
// dropped, or the one in flight).
type segment struct {
	id     uint64
	path   string
	f      *os.File
	frames []frameInfo
	read   int
	start  int64  // offset of the first record (after the header)
	header []byte // the segment's header; shared read-only with entries
	size   int64  // end of the last complete record
	dirty  bool   // written since the last fsync
	old    bool   // found at open: its records are replays
	// recTotal sums the records of frames, recRead those of frames[:read].
	recTotal, recRead int64
}

// position is a byte offset in a segment.
type position struct {
	seg uint64
	off int64
}

// cursor is what is committed: the records still to deliver are the one
// at first (when hasFirst) and every record from head on.
type cursor struct {
	hasFirst bool
	first    position
	head     position
	// table lists, for every segment holding unresolved records, how many
	// (batches and records) it holds: what a start must find there, so
	// that damage done while stopped is counted exactly. Encoded as
	// tableEntrySize-byte entries (id u64, batches u32, records u32) in a
	// string, so that a cursor stays comparable.
	table string
}

const tableEntrySize = 16

// segCount is a cursor table entry.
type segCount struct {
	batches, records int64
}

// tableCounts decodes c.table.
func (c cursor) tableCounts() map[uint64]segCount {
	m := map[uint64]segCount{}
	le := binary.LittleEndian
	for i := 0; i+tableEntrySize <= len(c.table); i += tableEntrySize {
		e := c.table[i : i+tableEntrySize]
		m[le.Uint64([]byte(e[:8]))] = segCount{int64(le.Uint32([]byte(e[8:12]))), int64(le.Uint32([]byte(e[12:16])))}
	}
	return m
}

// diskQueue is the "disk" kind. See the package doc and README.md for the
// semantics; the crash-safety order is:
//
//   - append: write the whole record at the end of the active segment with
//     one write; it is durable after the next sync (fsync of the segment,
//     and of the directory after a segment was created).
//   - commit: write the cursor to cursor.tmp, fsync, rename over cursor,
//     fsync the directory: after each sync, and before segments are
//     deleted. After each ack the cursor is also written and renamed
//     without the fsyncs, so that a process crash never replays a record
//     the output took; the next sync makes it durable.
//   - delete: a segment is removed only after a cursor that no longer
//     needs it was committed.
//
// A crash at any point leaves: every synced record that the committed
// cursor does not mark resolved (replayed, at least once), possibly a torn
// record at the end of a segment (detected by length and CRC, counted,
// skipped, truncated away at open), and segments the cursor no longer needs
// (removed at open).
type diskQueue struct {
	dir  string
	opt  diskOptions
	lock *os.File

	// pushMu serializes push (and the reclaim an ack may do) so that the
	// room a push made on disk is still there when it writes. Taken before
	// commitMu and mu.
	pushMu sync.Mutex

	mu sync.Mutex
	// segs are oldest first; the last is the active one (appended to)
	// when activeOpen.
	segs        []*segment
	activeOpen  bool
	nextID      uint64
	dirDirty    bool
	broken      bool   // the active segment has a failed write at its end
	quiet       bool   // recovering a segment whose loss countDamage logs
	damage      string // what countDamage says the damage was, when known
	hasInflight bool
	inflightSeg *segment
	inflightIdx int
	frameBuf    []byte
	readBuf     []byte
	header      []byte // for the next new segment
	qBytes      int64  // queued on disk (not in flight)
	qRecords    int64
	qBatches    int64
	st          queueStats
	closed      bool

	// Degraded: a disk write failed (a full disk, an I/O error). New
	// batches are held in memory (held, oldest first, after everything on
	// disk) within the caps; what is on disk is still delivered. Every
	// retryDiskEvery a push tries the disk again, moving what is held
	// there first, in order.
	degraded     bool
	degradedErr  error
	lastTry      int64 // push time of the last attempt (Unix ns)
	held         []entry
	heldBytes    int64
	heldRecords  int64
	heldSeg      uint64 // pseudo segment ID of held entries with the current header
	heldHeader   []byte // the header heldSeg stands for
	inflightHeld bool   // the entry in flight is held[0]'s predecessor, kept in heldCur
	heldCur      entry
	lastErrLog   int64 // push time of the last degraded error log (Unix ns)

	// lastPayload is the newest record an earlier process appended, as
	// found at open (delivered since or not); nil when none was found.
	lastPayload []byte

	// relMu is held while segments taken off segs are committed away and
	// deleted (release); pendingBytes (under mu) is what they use until
	// then, counted in the budget.
	relMu        sync.Mutex
	pendingBytes int64
	// sharedBytes (under mu) is what opt.shared used at the last append.
	sharedBytes int64

	commitMu  sync.Mutex // serializes commits; taken before mu
	committed cursor
	hasCommit bool
	durable   bool // committed was fsynced
}

// openDiskQueue opens (creating) the queue in dir, recovers what an earlier
// process left and starts a fresh active segment.
func openDiskQueue(dir string, opt diskOptions) (*diskQueue, error) {
	if opt.segmentBytes <= 0 {
		opt.segmentBytes = min(max(opt.maxBytes/8, minSegmentBytes), maxSegmentBytes)
	}
	if opt.log == nil {
		opt.log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open buffer dir: %w", err)
	}
	if err := checkDir(dir, opt.log); err != nil {
		return nil, err
	}
	lock, err := dirlock.Lock(filepath.Join(dir, lockName))
	if errors.Is(err, dirlock.ErrLocked) {
		return nil, fmt.Errorf("lock buffer dir %s: in use by another output or process: %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("lock buffer dir: %w", err)
	}
	q := &diskQueue{dir: dir, opt: opt, lock: lock, header: opt.header}
	if err := q.recover(); err != nil {
		q.closeFiles()
		return nil, err
	}
	// No active segment yet: the first push starts one (never appending
	// after a possible torn tail), so that a full disk does not keep the
	// queue from opening and delivering what it holds.
	//
	// A crash can bring back records dropped at the cap after the last
	// commit: drop them again, so that the queue is within its caps.
	var dels []*segment
	dropped := false
	for q.qBatches > 0 && (q.qBytes > opt.maxBytes || (opt.maxRecords > 0 && q.qRecords > int64(opt.maxRecords)) ||
		(opt.diskBytes > 0 && q.usageLocked()-blocksOf(dels) > opt.diskBytes)) {
		_, fr := q.takeLocked()
		q.st.capBatches++
		q.st.capRecords += uint64(fr.records)
		dels = append(dels, q.deletableLocked()...)
		dropped = true
	}
	// Commit now, while there is likely room: a cursor file that exists can
	// be overwritten in place on a full disk (commitCursor), so delivered
	// segments can always be removed.
	if _, err := os.Lstat(filepath.Join(dir, cursorName)); err != nil && !dropped {
		if err := q.commit(); err != nil {
			opt.log.Warn("buffer could not write its cursor", "dir", dir, "err", err)
		}
	}
	if dropped {
		err := q.commit()
		if err == nil {
			err = q.release(dels)
		}
		if err != nil {
			// The records are resolved all the same (a crash before the
			// next commit brings them back, to be dropped again).
			opt.log.Warn("buffer could not commit after dropping records over its caps", "dir", dir, "err", err)
		}
	}
	return q, nil
}

// checkDir refuses a buffer directory that is not a directory and warns,
// with its mode, about one that others may write to: they could plant,
// change or remove segments. (Files in it are opened without following
// symlinks and created exclusively, so a planted file is never written
// through.)
func checkDir(dir string, log *slog.Logger) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("open buffer dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("open buffer dir %s: not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		log.Warn("buffer dir is writable by other users, who could plant, change or remove its files; chmod go-w it",
			"dir", dir, "mode", fmt.Sprintf("%#o", perm))
	}
	return nil
}

// recover reads the cursor and the segments, indexes every record still to
// deliver and removes what is no longer needed.
func (q *diskQueue) recover() error {
	_ = os.Remove(filepath.Join(q.dir, cursorTmpName))
	cur, haveCursor, err := readCursor(filepath.Join(q.dir, cursorName))
	if err != nil {
		q.opt.log.Warn("buffer cursor unreadable; replaying every segment", "err", err)
	}
	ids, err := listSegments(q.dir)
	if err != nil {
		return err
	}
	// The newest record of all, resolved or not, before resolved segments
	// go.
	for _, id := range slices.Backward(ids) {
		data, err := readFileNoFollow(q.segPath(id))
		if err != nil {
			return fmt.Errorf("read segment: %w", err)
		}
		if _, start, herr := parseSegmentHeader(data); herr == nil {
			if frames, _ := scanSegment(data, start); len(frames) > 0 {
				fr := frames[len(frames)-1]
				q.lastPayload = slices.Clone(data[fr.off+frameHeaderSize : fr.off+fr.total()])
				break
			}
		}
	}
	// What the cursor says each segment holds: found short at open, the
	// difference is damage done while stopped (a segment deleted, emptied,
	// truncated or overwritten), counted as corrupt and logged once per
	// segment.
	expected := cur.tableCounts()
	one := func(id uint64) (*segment, error) {
		path := q.segPath(id)
		data, err := readFileNoFollow(path)
		if err != nil {
			return nil, fmt.Errorf("read segment: %w", err)
		}
		_, start, herr := parseSegmentHeader(data)
		switch {
		case errors.Is(herr, errSegmentV1):
			return nil, fmt.Errorf("buffer segment %s: %w", path, herr)
		case errors.Is(herr, errSegmentTorn):
			// Cut short while it was being created: it holds nothing.
			if err := os.Remove(path); err != nil {
				return nil, fmt.Errorf("remove torn segment: %w", err)
			}
			return nil, nil
		case herr != nil:
			start = int64(len(segMagic)) // scan what is left, to count it
		}
		// What this segment still holds: the first record, and
		// everything from the head on.
		var ranges []int64 // start offsets to scan; the first may be a single record
		single := false
		switch {
		case !haveCursor || id > cur.head.seg:
			ranges = []int64{start}
		case id == cur.head.seg:
			ranges = []int64{max(cur.head.off, start)}
		}
		if haveCursor && cur.hasFirst && id == cur.first.seg {
			if id < cur.head.seg || (id == cur.head.seg && cur.first.off < cur.head.off) {
				ranges = append([]int64{cur.first.off}, ranges...)
				single = true
			}
		}
		if len(ranges) == 0 {
			if err := os.Remove(path); err != nil {
				return nil, fmt.Errorf("remove resolved segment: %w", err)
			}
			return nil, nil
		}
		if herr != nil {
			return nil, q.dropSegment(path, data, ranges, single, herr)
		}
		return q.recoverSegment(id, path, data, ranges, single)
	}
	present := map[uint64]bool{}
	for _, id := range ids {
		q.nextID = max(q.nextID, id+1)
		present[id] = true
		exp, known := expected[id]
		q.quiet = known
		b0, r0 := q.st.corruptBatches, q.st.corruptRecords
		seg, err := one(id)
		q.quiet = false
		if err != nil {
			return err
		}
		var foundB, foundR int64
		if seg != nil {
			q.segs = append(q.segs, seg)
			for _, fr := range seg.frames {
				seg.recTotal += int64(fr.records)
				q.qBytes += fr.total()
				q.qRecords += int64(fr.records)
				q.qBatches++
			}
			foundB, foundR = int64(len(seg.frames)), seg.recTotal
		}
		if known {
			q.countDamage(q.segPath(id), exp, foundB, foundR, int64(q.st.corruptBatches-b0), int64(q.st.corruptRecords-r0))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(expected)) {
		if !present[id] {
			q.countDamage(q.segPath(id), expected[id], 0, 0, 0, 0)
		}
	}
	if haveCursor {
		q.nextID = max(q.nextID, cur.head.seg+1)
		// Possibly written without fsync by the last process: the next
		// sync makes it durable.
		q.committed, q.hasCommit = cur, true
	}
	return nil
}

// warnDamage logs damage found in a segment, unless countDamage logs the
// segment's loss as a whole (quiet).
func (q *diskQueue) warnDamage(msg string, args ...any) {
	if q.quiet && q.damage == "" {
		q.damage = msg
	}
	if !q.quiet {
		q.opt.log.Warn(msg, args...)
	}
}

// countDamage compares what the cursor said a segment held (exp) with
// what a start found there (found*, and what was already counted corrupt
// in it: region*), counts the rest as corrupt and logs the segment's loss
// once.
func (q *diskQueue) countDamage(path string, exp segCount, foundB, foundR, regionB, regionR int64) {
	lostB := max(0, exp.batches-foundB)
	lostR := max(0, exp.records-foundR)
	if lostB == 0 && lostR == 0 {
		return
	}
	q.st.corruptBatches += uint64(max(0, lostB-regionB))
	q.st.corruptRecords += uint64(max(0, lostR-regionR))
	damage := q.damage
	switch {
	case damage != "":
	case foundB == 0 && regionB == 0:
		damage = "missing or empty"
	case regionB == 0:
		damage = "truncated"
	default:
		damage = "corrupt records"
	}
	q.damage = ""
	q.opt.log.Warn("buffer segment damaged while gpusampler was stopped; its lost records are counted as corrupt",
		"segment", path, "damage", damage, "batches_lost", lostB, "records_lost", lostR,
		"batches_found", foundB, "records_found", foundR)
}

// Segment header errors.
var (
	errSegmentV1     = errors.New("format 1 of an older gpusampler, which this version cannot read (it does not record the metric catalog): deliver it with the version that wrote it, or move it out of the buffer directory")
	errSegmentTorn   = errors.New("segment cut short while being created")
	errSegmentHeader = errors.New("segment header corrupt")
)

// parseSegmentHeader checks a segment's header and returns it and the
// offset of the first record.
func parseSegmentHeader(data []byte) (header []byte, start int64, err error) {
	if len(data) >= len(segMagicV1) && string(data[:len(segMagicV1)]) == segMagicV1 {
		return nil, 0, errSegmentV1
	}
	if len(data) < int(segHeaderSize) {
		if !bytes.HasPrefix([]byte(segMagic), data[:min(len(data), len(segMagic))]) {
			return nil, 0, errSegmentHeader
		}
		return nil, 0, errSegmentTorn
	}
	if string(data[:len(segMagic)]) != segMagic {
		return nil, 0, errSegmentHeader
	}
	n := int64(binary.LittleEndian.Uint32(data[len(segMagic):]))
	if n > int64(len(data))-segHeaderSize {
		if bytes.Contains(data[segHeaderSize:], []byte(frameMagic)) {
			return nil, 0, errSegmentHeader
		}
		return nil, 0, errSegmentTorn
	}
	header = data[segHeaderSize : segHeaderSize+n]
	if crc32.Checksum(header, castagnoli) != binary.LittleEndian.Uint32(data[len(segMagic)+4:]) {
		return nil, 0, errSegmentHeader
	}
	return bytes.Clone(header), segHeaderSize + n, nil
}

// appendSegmentHeader appends a segment's magic and header to dst.
func appendSegmentHeader(dst, header []byte) []byte {
	dst = append(dst, segMagic...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(header)))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(header, castagnoli))
	return append(dst, header...)
}

// dropSegment counts what a segment with a corrupt header still held (from
// each start offset; the first only for one record when single) as corrupt
// and removes it: without its header the records' metric IDs cannot be
// mapped onto the catalog, and replaying them could relabel samples.
func (q *diskQueue) dropSegment(path string, data []byte, starts []int64, single bool, why error) error {
	var batches, records uint64
	for i, start := range starts {
		frames, bad := scanSegment(data, start)
		if single && i == 0 {
			batches++
			if len(frames) > 0 && frames[0].off == start {
				records += uint64(frames[0].records)
			}
			continue
		}
		for _, fr := range frames {
			batches++
			records += uint64(fr.records)
		}
		for _, r := range bad {
			if r.start != int64(len(segMagic)) { // not the header itself
				batches++
			}
		}
	}
	batches = max(batches, 1)
	q.st.corruptBatches += batches
	q.st.corruptRecords += records
	q.st.corruptBytes += uint64(len(data))
	q.warnDamage("buffer segment dropped: its header is corrupt, so its batches cannot be mapped onto the metric catalog",
		"segment", path, "batches", batches, "records", records, "err", why)
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove corrupt segment: %w", err)
	}
	return nil
}

// recoverSegment scans one segment's data from each start offset (the
// first only for one record when single) and returns it, or nil after
// removing a segment with nothing left to deliver.
func (q *diskQueue) recoverSegment(id uint64, path string, data []byte, starts []int64, single bool) (*segment, error) {
	header, start, _ := parseSegmentHeader(data)
	seg := &segment{id: id, path: path, old: true, size: int64(len(data)), start: start, header: header}
	validEnd := int64(-1)
	for i, start := range starts {
		frames, bad := scanSegment(data, start)
		if single && i == 0 {
			if len(frames) > 0 && frames[0].off == start {
				seg.frames = append(seg.frames, frames[0])
			} else {
				// The first record is gone: count it once.
				q.st.corruptBatches++
				q.warnDamage("buffer record corrupt; dropped", "segment", path, "offset", start)
			}
			continue
		}
		seg.frames = append(seg.frames, frames...)
		for _, r := range bad {
			q.st.corruptBatches++
			q.st.corruptBytes += uint64(r.end - r.start)
			recs := regionRecords(data, r)
			q.st.corruptRecords += recs
			if r.end != int64(len(data)) {
				q.warnDamage("buffer record corrupt; dropped", "segment", path, "offset", r.start,
					"bytes", r.end-r.start, "records", recs)
			}
		}
		if n := len(bad); n > 0 && bad[n-1].end == int64(len(data)) {
			validEnd = bad[n-1].start
		}
	}
	if validEnd >= 0 {
		// A torn tail: cut it off so that it is counted once.
		if err := os.Truncate(path, validEnd); err != nil {
			return nil, fmt.Errorf("truncate torn segment: %w", err)
		}
		seg.size = validEnd
		q.warnDamage("buffer segment ended in a torn record; skipped", "segment", path, "offset", validEnd)
	}
	if len(seg.frames) == 0 {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove empty segment: %w", err)
		}
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|oNoFollow, 0)
	if err != nil {
		return nil, fmt.Errorf("open segment: %w", err)
	}
	if validEnd >= 0 {
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("sync segment: %w", err)
		}
	}
	seg.f = f
	return seg, nil
}

// region is a byte range [start, end) of a segment.
type region struct{ start, end int64 }

// scanSegment returns the valid records in data from start on, and the
// corrupt regions between and after them. A corrupt region is skipped by
// searching for the next record magic that starts a valid record.
func scanSegment(data []byte, start int64) (frames []frameInfo, bad []region) {
	pos := max(start, 0)
	badStart := int64(-1)
	for pos < int64(len(data)) {
		if fr, ok := parseFrame(data, pos); ok {
			if badStart >= 0 {
				bad = append(bad, region{badStart, pos})
				badStart = -1
			}
			frames = append(frames, fr)
			pos += fr.total()
			continue
		}
		if badStart < 0 {
			badStart = pos
		}
		i := bytes.Index(data[pos+1:], []byte(frameMagic))
		if i < 0 {
			pos = int64(len(data))
			break
		}
		pos += 1 + int64(i)
	}
	if badStart >= 0 {
		bad = append(bad, region{badStart, int64(len(data))})
	}
	return frames, bad
}

// regionRecords returns the record count a corrupt region's header claims
// when the header is consistent with the region (its length spans exactly
// the region: only the payload was damaged), else 0 (unknown).
func regionRecords(data []byte, r region) uint64 {
	if r.end-r.start < frameHeaderSize || string(data[r.start:r.start+4]) != frameMagic {
		return 0
	}
	h := data[r.start : r.start+frameHeaderSize]
	if frameHeaderSize+int64(binary.LittleEndian.Uint32(h[4:])) != r.end-r.start {
		return 0
	}
	return uint64(binary.LittleEndian.Uint32(h[16:]))
}

// parseFrame checks the record at data[pos:].
func parseFrame(data []byte, pos int64) (frameInfo, bool) {
	if int64(len(data))-pos < frameHeaderSize {
		return frameInfo{}, false
	}
	h := data[pos : pos+frameHeaderSize]
	if string(h[:4]) != frameMagic {
		return frameInfo{}, false
	}
	size := binary.LittleEndian.Uint32(h[4:])
	if int64(size) > int64(len(data))-pos-frameHeaderSize {
		return frameInfo{}, false
	}
	payload := data[pos+frameHeaderSize : pos+frameHeaderSize+int64(size)]
	if frameCRC(h, payload) != binary.LittleEndian.Uint32(h[20:]) {
		return frameInfo{}, false
	}
	return frameInfo{off: pos, size: size, records: binary.LittleEndian.Uint32(h[16:]),
		timeNS: int64(binary.LittleEndian.Uint64(h[8:]))}, true
}

func frameCRC(header, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(header[4:20], castagnoli), castagnoli, payload)
}

func appendFrame(dst, payload []byte, records int, timeNS int64) []byte {
	start := len(dst)
	dst = append(dst, frameMagic...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(timeNS))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(records))
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	dst = append(dst, payload...)
	h := dst[start : start+frameHeaderSize]
	binary.LittleEndian.PutUint32(h[20:], frameCRC(h, dst[start+frameHeaderSize:]))
	return dst
}

func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list buffer dir: %w", err)
	}
	var ids []uint64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), segExt)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		id, err := strconv.ParseUint(name, 10, 64)
		if err != nil {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

func (q *diskQueue) segPath(id uint64) string {
	return filepath.Join(q.dir, fmt.Sprintf("%020d%s", id, segExt))
}

// roll starts a new active segment with header. A name already taken (a
// file planted under the next segment's name) is skipped, logged once.
// Called with mu held.
func (q *diskQueue) roll(header []byte) error {
	if err := q.opt.hooks.fail("create"); err != nil {
		return fmt.Errorf("create segment: %w", err)
	}
	var f *os.File
	var path string
	var id uint64
	for tries := 0; ; tries++ {
		id = q.nextID
		path = q.segPath(id)
		var err error
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|oNoFollow, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || tries >= maxCollisions {
			return fmt.Errorf("create segment: %w", err)
		}
		q.nextID++
		q.opt.log.Warn("buffer segment name taken by a file this buffer did not write; skipping that name (the file is left alone and never read)",
			"file", path)
	}
	q.nextID++
	q.opt.hooks.at("roll.created")
	head := appendSegmentHeader(nil, header)
	if _, err := f.Write(head); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("create segment: %w", err)
	}
	start := int64(len(head))
	q.segs = append(q.segs, &segment{id: id, path: path, f: f, size: start, start: start, header: header, dirty: true})
	q.activeOpen = true
	q.dirDirty = true
	q.broken = false
	return nil
}

// active returns the segment being appended to, nil when there is none (a
// push starts one).
func (q *diskQueue) active() *segment {
	if !q.activeOpen {
		return nil
	}
	return q.segs[len(q.segs)-1]
}

// resolvedLocked reports whether every record of s was taken and none is
// in flight.
func (q *diskQueue) resolvedLocked(s *segment) bool {
	return s.read == len(s.frames) && !(q.hasInflight && q.inflightSeg == s)
}

// usageLocked returns what the queue's files use on disk, as the budget
// counts it: every segment rounded up to whole blocks, plus the reserve.
func (q *diskQueue) usageLocked() int64 {
	u := int64(reserveBlocks*blockSize) + q.pendingBytes + q.sharedBytes
	for _, s := range q.segs {
		u += roundBlock(s.size)
	}
	return u
}

// sharedSize returns what the shared files use now, block-rounded (a
// missing one nothing; links are not followed).
func (q *diskQueue) sharedSize() int64 {
	var n int64
	for _, name := range q.opt.shared {
		if st, err := os.Lstat(filepath.Join(q.dir, name)); err == nil && st.Mode().IsRegular() {
			n += roundBlock(st.Size())
		}
	}
	return n
}

func roundBlock(n int64) int64 { return (n + blockSize - 1) / blockSize * blockSize }

// blocksOf returns what segs use on disk as the budget counts it: the part
// of pendingBytes that releasing them gives back.
func blocksOf(segs []*segment) int64 {
	var n int64
	for _, s := range segs {
		n += roundBlock(s.size)
	}
	return n
}

// needsRollLocked reports whether a record of total bytes read back with
// header goes into a new segment.
func (q *diskQueue) needsRollLocked(total int64, header []byte) bool {
	a := q.active()
	return a == nil || q.broken || !bytes.Equal(a.header, header) ||
		(a.size-a.start+total > q.opt.segmentBytes && len(a.frames) > 0)
}

func (q *diskQueue) push(payload []byte, records int, nowNS int64) error {
	total := frameHeaderSize + int64(len(payload))
	if total > q.opt.maxBytes || (q.opt.maxRecords > 0 && records > q.opt.maxRecords) ||
		len(payload) > maxFramePayloadSize {
		return tooLarge(total, records)
	}
	q.pushMu.Lock()
	defer q.pushMu.Unlock()
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return errQueueClosed
	}
	for q.qBatches+int64(len(q.held)) > 0 && (q.qBytes+q.heldBytes+total > q.opt.maxBytes ||
		(q.opt.maxRecords > 0 && q.qRecords+q.heldRecords+int64(records) > int64(q.opt.maxRecords))) {
		q.dropOldestLocked()
	}
	header := q.header
	dels := q.deletableLocked()
	tryDisk := !q.degraded || nowNS-q.lastTry >= retryDiskEvery || nowNS < q.lastTry
	if q.degraded && tryDisk {
		q.lastTry = nowNS
	}
	q.mu.Unlock()
	if err := q.release(dels); err != nil {
		q.opt.log.Error("buffer segment cleanup failed", "err", err)
	}
	if tryDisk {
		err := q.unhold()
		if err == nil {
			err = q.appendDisk(payload, records, nowNS, header, nil)
		}
		if err == nil {
			q.mu.Lock()
			if q.degraded {
				q.degraded, q.degradedErr = false, nil
				q.opt.log.Warn("disk buffer writes to disk again; what it held in memory was moved there", "dir", q.dir)
			}
			q.mu.Unlock()
			return nil
		}
		if errors.Is(err, errQueueClosed) {
			return err
		}
		q.degrade(err, nowNS)
	}
	q.mu.Lock()
	q.holdLocked(entry{payload: slices.Clone(payload), records: records, timeNS: nowNS}, header)
	q.mu.Unlock()
	return nil
}

// degrade notes that a disk write failed: new batches are held in memory
// until a later push finds the disk writable again. Logged at error level
// once per episode (and at most once a minute).
func (q *diskQueue) degrade(err error, nowNS int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.st.diskErrors++
	q.lastTry = nowNS
	if q.degraded {
		return
	}
	q.degraded, q.degradedErr = true, err
	q.st.degradedEpisodes++
	if q.lastErrLog == 0 || nowNS-q.lastErrLog >= int64(logEvery) {
		q.lastErrLog = nowNS
		q.opt.log.Error("disk buffer cannot write to disk; it keeps delivering what it holds and holds new batches in memory within its caps (the oldest dropped, counted) until the disk takes writes again",
			"dir", q.dir, "err", err)
	}
}

// holdLocked queues e in memory, after everything on disk. mu held.
func (q *diskQueue) holdLocked(e entry, header []byte) {
	if q.heldHeader == nil || !bytes.Equal(q.heldHeader, header) {
		// A pseudo segment per header, so that the reader takes up each
		// header once, as it does for a segment.
		q.heldHeader, q.heldSeg = header, q.nextID
		q.nextID++
	}
	e.header, e.segment = header, q.heldSeg
	q.held = append(q.held, e)
	q.heldBytes += int64(len(e.payload)) + frameHeaderSize
	q.heldRecords += int64(e.records)
	q.st.appended++
	q.st.heldBatches++
}

// unhold moves the entries held in memory to disk, oldest first; the ones
// it could not write stay held (after those it wrote, so order is kept).
func (q *diskQueue) unhold() error {
	for {
		q.mu.Lock()
		if len(q.held) == 0 {
			q.mu.Unlock()
			return nil
		}
		e := q.held[0]
		q.mu.Unlock()
		if err := q.appendDiskHeld(e); err != nil {
			return err
		}
	}
}

// dropOldestLocked drops the oldest queued record, on disk or (after
// everything on disk) held in memory, counted at the cap. mu held.
func (q *diskQueue) dropOldestLocked() {
	if q.qBatches > 0 {
		_, fr := q.takeLocked()
		q.st.capBatches++
		q.st.capRecords += uint64(fr.records)
		return
	}
	e := q.popHeldLocked()
	q.st.capBatches++
	q.st.capRecords += uint64(e.records)
}

func (q *diskQueue) popHeldLocked() entry {
	e := q.held[0]
	q.held[0] = entry{}
	q.held = q.held[1:]
	q.heldBytes -= int64(len(e.payload)) + frameHeaderSize
	q.heldRecords -= int64(e.records)
	if len(q.held) == 0 {
		q.held = nil
	}
	return e
}

// appendDiskHeld writes the oldest held entry e to disk and takes it off
// the held queue, unless the delivery goroutine took it into flight
// meanwhile (then there is nothing to move).
func (q *diskQueue) appendDiskHeld(e entry) error {
	return q.appendDisk(e.payload, e.records, e.timeNS, e.header, &e)
}

// appendDisk appends one record, read back with header, at the end of the
// active segment (starting one when needed), within the disk budget:
// it first drops the oldest queued records (counted at the cap) and
// removes the segments that frees, and drops the record itself when what
// is in flight leaves no room. pushMu held.
func (q *diskQueue) appendDisk(payload []byte, records int, nowNS int64, header []byte, held *entry) error {
	total := frameHeaderSize + int64(len(payload))
	shared := q.sharedSize()
	q.mu.Lock()
	q.sharedBytes = shared
	if q.closed {
		q.mu.Unlock()
		return errQueueClosed
	}
	var dels []*segment
	closeActive := func() {
		// Every record of the active segment was resolved: close it, so
		// that it goes.
		if a := q.active(); a != nil && q.resolvedLocked(a) {
			q.activeOpen = false
			dels = append(dels, q.deletableLocked()...)
		}
	}
	if q.needsRollLocked(total, header) {
		closeActive()
	}
	if budget := q.opt.diskBytes; budget > 0 {
		waits := 0
		need := func() int64 {
			if q.needsRollLocked(total, header) {
				return roundBlock(segHeaderSize + int64(len(header)) + total)
			}
			a := q.active()
			return roundBlock(a.size+total) - roundBlock(a.size)
		}
		// usageLocked counts the segments collected in dels (pendingBytes)
		// until release deletes them, which happens before this record is
		// written: they are room for it already. Without taking them off,
		// every drop would leave the usage where it was and the loop would
		// drop the whole backlog.
		for q.usageLocked()-blocksOf(dels)+need() > budget {
			if q.qBatches > 0 {
				_, fr := q.takeLocked()
				q.st.capBatches++
				q.st.capRecords += uint64(fr.records)
				dels = append(dels, q.deletableLocked()...)
				continue
			}
			if a := q.active(); a != nil && q.resolvedLocked(a) {
				closeActive()
				continue
			}
			if q.pendingBytes > blocksOf(dels) && waits < 2 {
				// Segments on their way out (another goroutine commits
				// before it deletes them): wait for that.
				waits++
				q.mu.Unlock()
				q.relMu.Lock()
				q.relMu.Unlock() //nolint:staticcheck // waits for a release in progress
				q.mu.Lock()
				continue
			}
			// Only the record in flight is left: no room for this one.
			if held != nil {
				if !q.isHeldHeadLocked(held) {
					break
				}
				q.popHeldLocked()
			}
			q.st.capBatches++
			q.st.capRecords += uint64(records)
			q.mu.Unlock()
			return q.release(dels)
		}
	}
	q.mu.Unlock()
	if err := q.release(dels); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return errQueueClosed
	}
	if held != nil && !q.isHeldHeadLocked(held) {
		return nil // taken into flight meanwhile: delivered from memory
	}
	if q.needsRollLocked(total, header) {
		if err := q.roll(header); err != nil {
			return err
		}
	}
	a := q.active()
	q.frameBuf = appendFrame(q.frameBuf[:0], payload, records, nowNS)
	if q.opt.hooks.tear != nil && q.opt.hooks.tear() {
		a.f.WriteAt(q.frameBuf[:len(q.frameBuf)/2], a.size)
		q.opt.hooks.at("append.torn")
	}
	err := q.opt.hooks.fail("write")
	if err == nil {
		_, err = a.f.WriteAt(q.frameBuf, a.size)
	}
	if err != nil {
		// Cut the partial record off if we can; either way never append
		// after it.
		if a.f.Truncate(a.size) != nil {
			q.broken = true
		}
		return fmt.Errorf("append to buffer segment: %w", err)
	}
	a.frames = append(a.frames, frameInfo{off: a.size, size: uint32(len(payload)), records: uint32(records), timeNS: nowNS})
	a.recTotal += int64(records)
	a.size += total
	a.dirty = true
	q.qBytes += total
	q.qRecords += int64(records)
	q.qBatches++
	if held != nil {
		q.popHeldLocked() // counted as appended when it was held
	} else {
		q.st.appended++
	}
	q.opt.hooks.at("append.written")
	return nil
}

// isHeldHeadLocked reports whether e is still the oldest held entry. mu
// held.
func (q *diskQueue) isHeldHeadLocked(e *entry) bool {
	return len(q.held) > 0 && len(e.payload) > 0 && len(q.held[0].payload) == len(e.payload) &&
		&q.held[0].payload[0] == &e.payload[0]
}

// takeLocked takes the oldest queued record off the queue's accounting and
// returns its segment and index.
func (q *diskQueue) takeLocked() (*segment, frameInfo) {
	for _, s := range q.segs {
		if s.read < len(s.frames) {
			fr := s.frames[s.read]
			s.read++
			s.recRead += int64(fr.records)
			q.qBytes -= fr.total()
			q.qRecords -= int64(fr.records)
			q.qBatches--
			return s, fr
		}
	}
	panic("buffer: takeLocked on an empty queue") // callers check qBatches
}

// deletableLocked removes from q.segs every segment, other than the active
// one and the one holding the record in flight, whose records were all
// taken, and returns them for release. mu held.
func (q *diskQueue) deletableLocked() []*segment {
	var dels []*segment
	keep := q.segs[:0]
	for i, s := range q.segs {
		if (i < len(q.segs)-1 || !q.activeOpen) && q.resolvedLocked(s) {
			dels = append(dels, s)
			q.pendingBytes += roundBlock(s.size)
			continue
		}
		keep = append(keep, s)
	}
	clear(q.segs[len(keep):])
	q.segs = keep
	return dels
}

// release commits a cursor that no longer needs segs, then deletes them.
func (q *diskQueue) release(segs []*segment) error {
	if len(segs) == 0 {
		return nil
	}
	q.relMu.Lock()
	defer q.relMu.Unlock()
	if err := q.commit(); err != nil {
		for _, s := range segs {
			s.f.Close()
		}
		return fmt.Errorf("commit before deleting segments: %w", err)
	}
	q.opt.hooks.at("delete.committed")
	var errs []error
	for _, s := range segs {
		s.f.Close()
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("delete segment: %w", err))
		} else {
			q.mu.Lock()
			q.pendingBytes -= roundBlock(s.size)
			q.mu.Unlock()
		}
		q.opt.hooks.at("delete.removed")
	}
	return errors.Join(errs...)
}

// cursorLocked returns the cursor for the current state: the oldest
// unresolved record (in flight or queued) as first, and the next one as
// head. Recording the first apart keeps the cursor exact when records
// between the two were resolved out of order (dropped at the cap while the
// first was in flight, or skipped at an earlier recovery).
func (q *diskQueue) cursorLocked() cursor {
	var found []position
	if q.hasInflight {
		found = append(found, position{q.inflightSeg.id, q.inflightSeg.frames[q.inflightIdx].off})
	}
	for _, s := range q.segs {
		for i := s.read; i < len(s.frames) && len(found) < 2; i++ {
			found = append(found, position{s.id, s.frames[i].off})
		}
		if len(found) == 2 {
			break
		}
	}
	var c cursor
	if len(found) > 0 {
		c.hasFirst, c.first = true, found[0]
	}
	var tab []byte
	for _, s := range q.segs {
		b := int64(len(s.frames) - s.read)
		r := s.recTotal - s.recRead
		if q.hasInflight && q.inflightSeg == s {
			b++
			r += int64(s.frames[q.inflightIdx].records)
		}
		if b > 0 {
			tab = binary.LittleEndian.AppendUint64(tab, s.id)
			tab = binary.LittleEndian.AppendUint32(tab, uint32(b))
			tab = binary.LittleEndian.AppendUint32(tab, uint32(r))
		}
	}
	c.table = string(tab)
	switch a := q.active(); {
	case len(found) > 1:
		c.head = found[1]
	case a != nil:
		c.head = position{a.id, a.size}
	default:
		// No active segment: the next one to be created starts there.
		c.head = position{q.nextID, 0}
	}
	return c
}

// commit persists the current cursor durably: tmp file, fsync, rename,
// fsync dir.
func (q *diskQueue) commit() error { return q.commitCursor(true) }

// commitCursor writes the current cursor to cursor.tmp and renames it over
// cursor; durable adds the fsyncs (of the file before the rename and of the
// directory after it). A rename is atomic for the processes on the machine,
// so a cursor written without them already holds across a process crash
// (kill -9, OOM kill): only a machine crash can bring back the previous one.
func (q *diskQueue) commitCursor(durable bool) error {
	q.commitMu.Lock()
	defer q.commitMu.Unlock()
	q.mu.Lock()
	c := q.cursorLocked()
	q.mu.Unlock()
	if q.hasCommit && c == q.committed && (q.durable || !durable) {
		return nil
	}
	buf := make([]byte, 0, cursorSize+4+len(c.table))
	buf = append(buf, cursorMagic...)
	buf = binary.LittleEndian.AppendUint32(buf, cursorVersion)
	var flags uint32
	if c.hasFirst {
		flags = 1
	}
	buf = binary.LittleEndian.AppendUint32(buf, flags)
	buf = binary.LittleEndian.AppendUint64(buf, c.first.seg)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(c.first.off))
	buf = binary.LittleEndian.AppendUint64(buf, c.head.seg)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(c.head.off))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(c.table)/tableEntrySize))
	buf = append(buf, c.table...)
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	tmp := filepath.Join(q.dir, cursorTmpName)
	if err := writeFile(tmp, buf, durable); err != nil {
		os.Remove(tmp)
		// A full disk has no block for cursor.tmp; the cursor's own block
		// takes the new one in place, so that delivered segments can still
		// be deleted. The write is 52 bytes plus 16 per segment in the
		// table and can span sectors: a crash during it can tear the
		// cursor, which its checksum then refuses (every segment is
		// replayed: duplicates, no loss).
		if ierr := overwriteCursor(filepath.Join(q.dir, cursorName), buf, durable); ierr != nil {
			return errors.Join(err, ierr)
		}
	} else {
		q.opt.hooks.at("cursor.tmp")
		if err := os.Rename(tmp, filepath.Join(q.dir, cursorName)); err != nil {
			return fmt.Errorf("commit cursor: %w", err)
		}
		q.opt.hooks.at("cursor.renamed")
		if durable {
			if err := syncDir(q.dir); err != nil {
				return err
			}
		}
	}
	q.committed, q.hasCommit, q.durable = c, true, durable
	if q.opt.hooks.committed != nil {
		q.opt.hooks.committed()
	}
	return nil
}

// overwriteCursor writes data over the existing cursor file at path, in
// place (fsynced when sync is set).
func overwriteCursor(path string, data []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|oNoFollow, 0)
	if err != nil {
		return fmt.Errorf("write cursor in place: %w", err)
	}
	_, err = f.WriteAt(data, 0)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write cursor in place: %w", err)
	}
	return nil
}

// writeFile writes data to a new file at path, fsynced when sync is set.
func writeFile(path string, data []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|oNoFollow, 0o600)
	if err != nil {
		return fmt.Errorf("write cursor: %w", err)
	}
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write cursor: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync buffer dir: %w", err)
	}
	err = d.Sync()
	d.Close()
	if err != nil {
		return fmt.Errorf("sync buffer dir: %w", err)
	}
	return nil
}

func readCursor(path string) (cursor, bool, error) {
	data, err := readFileNoFollow(path)
	if errors.Is(err, os.ErrNotExist) {
		return cursor{}, false, nil
	}
	if err != nil {
		return cursor{}, false, fmt.Errorf("read cursor: %w", err)
	}
	le := binary.LittleEndian
	// Version 1: fixed size. Version 2: the table's entry count after head,
	// then the entries; bytes after the checksum are left over from a
	// longer cursor overwritten in place.
	size, table := cursorSize, ""
	if len(data) >= cursorSize+4 && string(data[:4]) == cursorMagic && le.Uint32(data[4:]) == cursorVersion {
		n := int(le.Uint32(data[44:]))
		size = cursorSize + 4 + n*tableEntrySize
		if n > len(data)/tableEntrySize || len(data) < size {
			return cursor{}, false, fmt.Errorf("read cursor: %w", errCorruptCursor)
		}
		table = string(data[48 : 48+n*tableEntrySize])
	} else if len(data) != cursorSize || le.Uint32(data[4:min(len(data), 8)]) != 1 {
		return cursor{}, false, fmt.Errorf("read cursor: %w", errCorruptCursor)
	}
	if string(data[:4]) != cursorMagic || crc32.Checksum(data[:size-4], castagnoli) != le.Uint32(data[size-4:]) {
		return cursor{}, false, fmt.Errorf("read cursor: %w", errCorruptCursor)
	}
	c := cursor{hasFirst: le.Uint32(data[8:])&1 != 0,
		first: position{le.Uint64(data[12:]), int64(le.Uint64(data[20:]))},
		head:  position{le.Uint64(data[28:]), int64(le.Uint64(data[36:]))}, table: table}
	if c.first.off < 0 || c.head.off < 0 {
		return cursor{}, false, fmt.Errorf("read cursor: %w", errCorruptCursor)
	}
	return c, true, nil
}

var (
	errCorruptPayload = errors.New("buffer: corrupt record")
	errCorruptCursor  = errors.New("buffer: corrupt cursor")
	errQueueClosed    = errors.New("buffer: queue closed")
)

func (q *diskQueue) next() (entry, bool, error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return entry{}, false, nil
	}
	if q.inflightHeld {
		e := q.heldCur
		q.mu.Unlock()
		return e, true, nil
	}
	if q.hasInflight {
		e, err := q.readLocked(q.inflightSeg, q.inflightSeg.frames[q.inflightIdx])
		q.mu.Unlock()
		return e, err == nil, err
	}
	var dels []*segment
	for q.qBatches > 0 {
		s, fr := q.takeLocked()
		e, err := q.readLocked(s, fr)
		if err == nil {
			q.hasInflight, q.inflightSeg, q.inflightIdx = true, s, s.read-1
			dels = q.deletableLocked()
			q.mu.Unlock()
			return e, true, q.release(dels)
		}
		if !errors.Is(err, errCorruptPayload) {
			// An I/O error: put the record back and let the caller retry.
			s.read--
			s.recRead -= int64(fr.records)
			q.qBytes += fr.total()
			q.qRecords += int64(fr.records)
			q.qBatches++
			q.mu.Unlock()
			return entry{}, false, err
		}
		q.st.corruptBatches++
		q.st.corruptRecords += uint64(fr.records)
		q.st.corruptBytes += uint64(fr.total())
		q.opt.log.Warn("buffer record failed its checksum; skipped", "segment", s.path, "offset", fr.off)
	}
	dels = q.deletableLocked()
	if len(q.held) > 0 {
		// Everything on disk is older than what is held in memory.
		q.heldCur, q.inflightHeld = q.popHeldLocked(), true
		e := q.heldCur
		q.mu.Unlock()
		return e, true, q.release(dels)
	}
	q.mu.Unlock()
	return entry{}, false, q.release(dels)
}

// readLocked reads and verifies one indexed record.
func (q *diskQueue) readLocked(s *segment, fr frameInfo) (entry, error) {
	q.readBuf = slices.Grow(q.readBuf[:0], int(fr.total()))[:fr.total()]
	if _, err := s.f.ReadAt(q.readBuf, fr.off); err != nil {
		if errors.Is(err, io.EOF) {
			return entry{}, fmt.Errorf("%w: record beyond end of segment", errCorruptPayload)
		}
		return entry{}, fmt.Errorf("read buffer segment: %w", err)
	}
	got, ok := parseFrame(q.readBuf, 0)
	if !ok || got.size != fr.size {
		return entry{}, fmt.Errorf("%w: record checksum", errCorruptPayload)
	}
	return entry{payload: q.readBuf[frameHeaderSize:], records: int(fr.records), timeNS: fr.timeNS, replayed: s.old,
		segment: s.id, header: s.header}, nil
}

func (q *diskQueue) ack() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	if q.inflightHeld {
		q.inflightHeld, q.heldCur = false, entry{}
		q.mu.Unlock()
		return
	}
	if !q.hasInflight {
		q.mu.Unlock()
		return
	}
	q.hasInflight, q.inflightSeg = false, nil
	dels := q.deletableLocked()
	q.mu.Unlock()
	if err := q.release(dels); err != nil {
		q.opt.log.Error("buffer segment cleanup failed", "err", err)
	}
	q.reclaim()
	// The output took the record: a process crash from now on must not
	// bring it back. The fsyncs wait for the next sync.
	if q.opt.hooks.noAckCommit {
		return
	}
	if err := q.commitCursor(false); err != nil {
		q.opt.log.Error("buffer cursor commit failed", "err", err)
	}
}

// reclaim closes and removes the active segment once every record in it
// was delivered and it holds reclaimBytes or more: a sink that keeps up
// frees the disk as it goes, instead of when the segment is full. It skips
// its turn while a push runs (that push, or the next ack, does it).
func (q *diskQueue) reclaim() {
	if !q.pushMu.TryLock() {
		return
	}
	defer q.pushMu.Unlock()
	q.mu.Lock()
	a := q.active()
	if a == nil || q.closed || q.qBatches > 0 || !q.resolvedLocked(a) || a.size-a.start < min(reclaimBytes, q.opt.segmentBytes) {
		q.mu.Unlock()
		return
	}
	q.activeOpen = false
	dels := q.deletableLocked()
	q.mu.Unlock()
	if err := q.release(dels); err != nil {
		q.opt.log.Error("buffer segment cleanup failed", "err", err)
	}
}

// setHeader sets the header of the records pushed from now on (it keeps
// header): a record is read back with the header that was current when it
// was pushed, so a push with a new header starts a segment.
func (q *diskQueue) setHeader(header []byte) {
	q.mu.Lock()
	q.header = header
	q.mu.Unlock()
}

func (q *diskQueue) stats() queueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.st
	st.batches, st.bytes, st.records = q.qBatches, q.qBytes, q.qRecords
	for _, s := range q.segs {
		if s.read < len(s.frames) {
			st.oldestNS = s.frames[s.read].timeNS
			break
		}
	}
	if st.oldestNS == 0 && len(q.held) > 0 {
		st.oldestNS = q.held[0].timeNS
	}
	st.batches += int64(len(q.held))
	st.bytes += q.heldBytes
	st.records += q.heldRecords
	st.heldNowBatches, st.heldNowRecords = int64(len(q.held)), q.heldRecords
	if q.hasInflight {
		fr := q.inflightSeg.frames[q.inflightIdx]
		st.batches++
		st.bytes += fr.total()
		st.records += int64(fr.records)
		st.oldestNS = fr.timeNS
	}
	if q.inflightHeld {
		st.batches++
		st.bytes += int64(len(q.heldCur.payload)) + frameHeaderSize
		st.records += int64(q.heldCur.records)
		st.oldestNS = q.heldCur.timeNS
		st.heldNowBatches++
		st.heldNowRecords += int64(q.heldCur.records)
	}
	st.degraded = q.degraded
	if q.closed {
		st.diskBytes = 0
	} else {
		st.diskBytes = q.usageLocked()
	}
	return st
}

// sync fsyncs every segment written since the last sync (and the directory
// after a segment was created), then commits the cursor.
func (q *diskQueue) sync() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	var dirty []*segment
	for _, s := range q.segs {
		if s.dirty {
			s.dirty = false
			dirty = append(dirty, s)
		}
	}
	dirDirty := q.dirDirty
	q.dirDirty = false
	q.mu.Unlock()
	var errs []error
	for _, s := range dirty {
		if err := s.f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, fmt.Errorf("sync segment: %w", err))
		}
	}
	if dirDirty {
		if err := syncDir(q.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		q.mu.Lock()
		for _, s := range dirty {
			s.dirty = true
		}
		q.dirDirty = q.dirDirty || dirDirty
		q.mu.Unlock()
		return errors.Join(errs...)
	}
	q.opt.hooks.at("sync.fsynced")
	return q.commit()
}

// close syncs, commits and closes every file. What is queued (and the
// record in flight) stays for the next open; what is held in memory is
// written to disk first, and counted lost (shutdown) where the disk still
// refuses it.
func (q *diskQueue) close() error {
	q.pushMu.Lock()
	q.mu.Lock()
	if q.inflightHeld {
		// Not delivered: hold it again, first.
		q.held = append([]entry{q.heldCur}, q.held...)
		q.heldBytes += int64(len(q.heldCur.payload)) + frameHeaderSize
		q.heldRecords += int64(q.heldCur.records)
		q.inflightHeld, q.heldCur = false, entry{}
	}
	held := len(q.held) > 0
	q.mu.Unlock()
	var errs []error
	if held {
		if err := q.unhold(); err != nil {
			q.mu.Lock()
			q.st.shutdownBatches += uint64(len(q.held))
			q.st.shutdownRecords += uint64(q.heldRecords)
			q.opt.log.Error("disk buffer closing with batches held in memory that the disk refused; they are lost",
				"dir", q.dir, "batches", len(q.held), "records", q.heldRecords, "err", err)
			q.held, q.heldBytes, q.heldRecords = nil, 0, 0
			q.mu.Unlock()
		}
	}
	q.pushMu.Unlock()
	if err := q.sync(); err != nil {
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.closeFiles()
	return err
}

// closeFiles closes every file without syncing; alone it is what a crash
// leaves behind (tests).
func (q *diskQueue) closeFiles() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, s := range q.segs {
		if s.f != nil {
			s.f.Close()
		}
	}
	if q.lock != nil {
		q.lock.Close()
		q.lock = nil
	}
}

func (q *diskQueue) snapshot() ([]entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []entry
	read := func(s *segment, fr frameInfo) error {
		e, err := q.readLocked(s, fr)
		if err != nil {
			return err
		}
		e.payload = slices.Clone(e.payload)
		out = append(out, e)
		return nil
	}
	if q.hasInflight {
		if err := read(q.inflightSeg, q.inflightSeg.frames[q.inflightIdx]); err != nil {
			return nil, err
		}
	}
	if q.inflightHeld {
		out = append(out, q.heldCur)
	}
	for _, s := range q.segs {
		for _, fr := range s.frames[s.read:] {
			if err := read(s, fr); err != nil {
				return nil, err
			}
		}
	}
	return append(out, q.held...), nil
}

// readFileNoFollow reads the file at path, refusing a symlink.
func readFileNoFollow(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

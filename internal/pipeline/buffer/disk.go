package buffer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	cursorVersion   = 1
	cursorSize      = 4 + 4 + 4 + 16 + 16 + 4
	cursorName      = "cursor"
	cursorTmpName   = "cursor.tmp"
	lockName        = "LOCK"

	minSegmentBytes     = 64 << 10
	maxSegmentBytes     = 16 << 20
	maxFramePayloadSize = 1<<31 - 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// diskOptions configure a diskQueue.
type diskOptions struct {
	maxBytes     int64
	maxRecords   int
	segmentBytes int64
	// header is the segment header (an encoded records.BufferSegment)
	// written at the start of every new segment until setHeader replaces
	// it.
	header []byte
	log    *slog.Logger
	hooks  diskHooks
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

	mu          sync.Mutex
	segs        []*segment // oldest first; the last is the active one
	nextID      uint64
	dirDirty    bool
	broken      bool // the active segment has a failed write at its end
	hasInflight bool
	inflightSeg *segment
	inflightIdx int
	frameBuf    []byte
	readBuf     []byte
	header      []byte // for the next new segment
	rollNext    bool   // the header changed: the next push starts a segment
	qBytes      int64  // queued (not in flight)
	qRecords    int64
	qBatches    int64
	st          queueStats
	closed      bool

	// lastPayload is the newest record an earlier process appended, as
	// found at open (delivered since or not); nil when none was found.
	lastPayload []byte

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
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	q := &diskQueue{dir: dir, opt: opt, lock: lock, header: opt.header}
	if err := q.recover(); err != nil {
		q.closeFiles()
		return nil, err
	}
	if err := q.roll(); err != nil {
		q.closeFiles()
		return nil, err
	}
	// A crash can bring back records dropped at the cap after the last
	// commit: drop them again, so that the queue is within its caps.
	dropped := false
	for q.qBatches > 0 && (q.qBytes > opt.maxBytes || (opt.maxRecords > 0 && q.qRecords > int64(opt.maxRecords))) {
		_, fr := q.takeLocked()
		q.st.capBatches++
		q.st.capRecords += uint64(fr.records)
		dropped = true
	}
	if dropped {
		if err := q.release(q.deletableLocked()); err != nil {
			q.closeFiles()
			return nil, err
		}
		if err := q.commit(); err != nil {
			q.closeFiles()
			return nil, err
		}
	}
	return q, nil
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
		data, err := os.ReadFile(q.segPath(id))
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
	for _, id := range ids {
		q.nextID = max(q.nextID, id+1)
		path := q.segPath(id)
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read segment: %w", err)
		}
		_, start, herr := parseSegmentHeader(data)
		switch {
		case errors.Is(herr, errSegmentV1):
			return fmt.Errorf("buffer segment %s: %w", path, herr)
		case errors.Is(herr, errSegmentTorn):
			// Cut short while it was being created: it holds nothing.
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("remove torn segment: %w", err)
			}
			continue
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
				return fmt.Errorf("remove resolved segment: %w", err)
			}
			continue
		}
		if herr != nil {
			if err := q.dropSegment(path, data, ranges, single, herr); err != nil {
				return err
			}
			continue
		}
		seg, err := q.recoverSegment(id, path, data, ranges, single)
		if err != nil {
			return err
		}
		if seg == nil {
			continue
		}
		q.segs = append(q.segs, seg)
		for _, fr := range seg.frames {
			q.qBytes += fr.total()
			q.qRecords += int64(fr.records)
			q.qBatches++
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
	q.opt.log.Warn("buffer segment dropped: its header is corrupt, so its batches cannot be mapped onto the metric catalog",
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
				q.opt.log.Warn("buffer record corrupt; dropped", "segment", path, "offset", start)
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
				q.opt.log.Warn("buffer record corrupt; dropped", "segment", path, "offset", r.start,
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
		q.opt.log.Warn("buffer segment ended in a torn record; skipped", "segment", path, "offset", validEnd)
	}
	if len(seg.frames) == 0 {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove empty segment: %w", err)
		}
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
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

// roll starts a new active segment. Called with mu held (or before the
// queue is shared).
func (q *diskQueue) roll() error {
	id := q.nextID
	path := q.segPath(id)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create segment: %w", err)
	}
	q.nextID++
	q.opt.hooks.at("roll.created")
	head := appendSegmentHeader(nil, q.header)
	if _, err := f.Write(head); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("create segment: %w", err)
	}
	start := int64(len(head))
	q.segs = append(q.segs, &segment{id: id, path: path, f: f, size: start, start: start, header: q.header, dirty: true})
	q.dirDirty = true
	q.broken, q.rollNext = false, false
	return nil
}

func (q *diskQueue) active() *segment { return q.segs[len(q.segs)-1] }

func (q *diskQueue) push(payload []byte, records int, nowNS int64) error {
	total := frameHeaderSize + int64(len(payload))
	if total > q.opt.maxBytes || (q.opt.maxRecords > 0 && records > q.opt.maxRecords) ||
		len(payload) > maxFramePayloadSize {
		return tooLarge(total, records)
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return errQueueClosed
	}
	for q.qBatches > 0 && (q.qBytes+total > q.opt.maxBytes ||
		(q.opt.maxRecords > 0 && q.qRecords+int64(records) > int64(q.opt.maxRecords))) {
		_, fr := q.takeLocked()
		q.st.capBatches++
		q.st.capRecords += uint64(fr.records)
	}
	if a := q.active(); q.broken || q.rollNext || (a.size-a.start+total > q.opt.segmentBytes && len(a.frames) > 0) {
		if err := q.roll(); err != nil {
			q.mu.Unlock()
			return err
		}
	}
	a := q.active()
	q.frameBuf = appendFrame(q.frameBuf[:0], payload, records, nowNS)
	if q.opt.hooks.tear != nil && q.opt.hooks.tear() {
		a.f.WriteAt(q.frameBuf[:len(q.frameBuf)/2], a.size)
		q.opt.hooks.at("append.torn")
	}
	if _, err := a.f.WriteAt(q.frameBuf, a.size); err != nil {
		// Cut the partial record off if we can; either way never append
		// after it.
		if a.f.Truncate(a.size) != nil {
			q.broken = true
		}
		q.mu.Unlock()
		return fmt.Errorf("append to buffer segment: %w", err)
	}
	a.frames = append(a.frames, frameInfo{off: a.size, size: uint32(len(payload)), records: uint32(records), timeNS: nowNS})
	a.size += total
	a.dirty = true
	q.qBytes += total
	q.qRecords += int64(records)
	q.qBatches++
	q.st.appended++
	dels := q.deletableLocked()
	q.mu.Unlock()
	q.opt.hooks.at("append.written")
	return q.release(dels)
}

// takeLocked takes the oldest queued record off the queue's accounting and
// returns its segment and index.
func (q *diskQueue) takeLocked() (*segment, frameInfo) {
	for _, s := range q.segs {
		if s.read < len(s.frames) {
			fr := s.frames[s.read]
			s.read++
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
// taken, and returns them for release.
func (q *diskQueue) deletableLocked() []*segment {
	var dels []*segment
	keep := q.segs[:0]
	for i, s := range q.segs {
		if i < len(q.segs)-1 && s.read == len(s.frames) && !(q.hasInflight && q.inflightSeg == s) {
			dels = append(dels, s)
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
		if err := os.Remove(s.path); err != nil {
			errs = append(errs, fmt.Errorf("delete segment: %w", err))
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
	if len(found) > 1 {
		c.head = found[1]
	} else {
		a := q.active()
		c.head = position{a.id, a.size}
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
	if len(q.segs) == 0 {
		q.mu.Unlock()
		return nil
	}
	c := q.cursorLocked()
	q.mu.Unlock()
	if q.hasCommit && c == q.committed && (q.durable || !durable) {
		return nil
	}
	buf := make([]byte, 0, cursorSize)
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
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	tmp := filepath.Join(q.dir, cursorTmpName)
	if err := writeFile(tmp, buf, durable); err != nil {
		return err
	}
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
	q.committed, q.hasCommit, q.durable = c, true, durable
	if q.opt.hooks.committed != nil {
		q.opt.hooks.committed()
	}
	return nil
}

// writeFile writes data to a new file at path, fsynced when sync is set.
func writeFile(path string, data []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
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
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cursor{}, false, nil
	}
	if err != nil {
		return cursor{}, false, fmt.Errorf("read cursor: %w", err)
	}
	if len(data) != cursorSize || string(data[:4]) != cursorMagic ||
		binary.LittleEndian.Uint32(data[4:]) != cursorVersion ||
		crc32.Checksum(data[:cursorSize-4], castagnoli) != binary.LittleEndian.Uint32(data[cursorSize-4:]) {
		return cursor{}, false, fmt.Errorf("read cursor: %w", errCorruptCursor)
	}
	le := binary.LittleEndian
	c := cursor{hasFirst: le.Uint32(data[8:])&1 != 0,
		first: position{le.Uint64(data[12:]), int64(le.Uint64(data[20:]))},
		head:  position{le.Uint64(data[28:]), int64(le.Uint64(data[36:]))}}
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
	if !q.hasInflight || q.closed {
		q.mu.Unlock()
		return
	}
	q.hasInflight, q.inflightSeg = false, nil
	dels := q.deletableLocked()
	q.mu.Unlock()
	if err := q.release(dels); err != nil {
		q.opt.log.Error("buffer segment cleanup failed", "err", err)
	}
	// The output took the record: a process crash from now on must not
	// bring it back. The fsyncs wait for the next sync.
	if q.opt.hooks.noAckCommit {
		return
	}
	if err := q.commitCursor(false); err != nil {
		q.opt.log.Error("buffer cursor commit failed", "err", err)
	}
}

// setHeader sets the header of the segments started from now on (it keeps
// header), and makes the next push start one: every record of a segment
// is read back with the header that was current when it was pushed.
func (q *diskQueue) setHeader(header []byte) {
	q.mu.Lock()
	q.header, q.rollNext = header, true
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
	if q.hasInflight {
		fr := q.inflightSeg.frames[q.inflightIdx]
		st.batches++
		st.bytes += fr.total()
		st.records += int64(fr.records)
		st.oldestNS = fr.timeNS
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
// record in flight) stays for the next open.
func (q *diskQueue) close() error {
	err := q.sync()
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
	for _, s := range q.segs {
		for _, fr := range s.frames[s.read:] {
			if err := read(s, fr); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

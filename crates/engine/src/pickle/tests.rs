//! The machine against streams written by CPython's own `pickle.dumps` (hex below, made with
//! Python 3.11), plus hostile streams.

use super::*;
use proptest::prelude::*;
use std::path::Path;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn run(bytes: &[u8]) -> crate::Result<Unpickled> {
    run_with(bytes, Loader::Python, &Budget::default())
}

fn run_with(bytes: &[u8], loader: Loader, budget: &Budget) -> crate::Result<Unpickled> {
    unpickle(bytes, Path::new("t.pkl"), "data.pkl", 0, loader, budget)
}

fn dict(u: &Unpickled, id: Id) -> Vec<(String, Id)> {
    match u.heap.get(id) {
        Node::Dict(pairs) => pairs
            .iter()
            .map(|&(k, v)| (u.heap.str(k).expect("str key").to_owned(), v))
            .collect(),
        other => panic!("not a dict: {other:?}"),
    }
}

fn field(u: &Unpickled, id: Id, key: &str) -> Id {
    dict(u, id)
        .into_iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no key {key}"))
        .1
}

/// `{'a': x, 'b': x, 't': (1, -2, 300, 70000, -5000000000), 'f': 2.5, 's': 'héllo', 'n': None, 'y': True, 'z': False}` with `x = [1]`, protocol 2.
const SHARED_P2: &str = "80027d71002858010000006171015d71024b0161580100000062710368025801000000747104284b014afeffffff4d2c014a701101008a05000efad5fe74710558010000006671064740040000000000005801000000737107580600000068c3a96c6c6f710858010000006e71094e580100000079710a8858010000007a710b89752e";
/// `{'a': [1, 2.5, 'x', 'é\u1234', (1, 2)], 'b': True, 'big': 2**70, 'neg': -3, 'by': b'ab'}`, protocol 0.
const TEXT_P0: &str = "286470300a56610a70310a286c70320a49310a6146322e350a6156780a70330a6156e95c75313233340a70340a612849310a49320a7470350a617356620a70360a4930310a73566269670a70370a4c313138303539313632303731373431313330333432344c0a73566e65670a70380a492d330a735662790a70390a635f636f646563730a656e636f64650a7031300a285661620a7031310a566c6174696e310a7031320a747031330a527031340a732e";
/// `OrderedDict([('k', {1, 2}), ('fs', frozenset([3])), ('b', b'\x00\xff'), ('long', 'x' * 300)])`, protocol 4.
const P4_HEAD: &str = "8004957c010000000000008c0b636f6c6c656374696f6e73948c0b4f72646572656444696374949394295294288c016b948f94284b014b02908c02667394284b0391948c016294430200ff948c046c6f6e6794582c010000";
const P4_TAIL: &str = "94752e";
/// `{'ba': bytearray(b'xyz'), 'l': list(range(5))}`, protocol 5.
const P5: &str = "80059529000000000000007d94288c0262619496030000000000000078797a948c016c945d94284b004b014b024b034b0465752e";
/// `{'w': 1, 'payload': Evil()}` where `Evil.__reduce__` returns `(os.system, ('echo hi',))`.
const EVIL_P2: &str = "80027d71002858010000007771014b0158070000007061796c6f6164710263706f7369780a73797374656d0a710358070000006563686f2068697104857105527106752e";
const EVIL_P4: &str = "80049536000000000000007d94288c0177944b018c077061796c6f6164948c05706f736978948c0673797374656d9493948c076563686f2068699485945294752e";
/// `l = []; l.append(l)`, protocol 2.
const CYCLE: &str = "80025d71006800612e";

fn p4() -> Vec<u8> {
    let mut bytes = hex(P4_HEAD);
    bytes.extend(std::iter::repeat_n(b'x', 300));
    bytes.extend(hex(P4_TAIL));
    bytes
}

fn all_streams() -> Vec<Vec<u8>> {
    vec![
        hex(SHARED_P2),
        hex(TEXT_P0),
        p4(),
        hex(P5),
        hex(EVIL_P2),
        hex(EVIL_P4),
        hex(CYCLE),
    ]
}

#[test]
fn protocol_2_values_and_memo_sharing() {
    let bytes = hex(SHARED_P2);
    let u = run(&bytes).unwrap();
    assert_eq!(u.len, bytes.len() as u64);
    // The memo shares one list object between two keys, as Python does.
    assert_eq!(field(&u, u.root, "a"), field(&u, u.root, "b"));
    let t: Vec<i64> = u
        .heap
        .seq(field(&u, u.root, "t"))
        .unwrap()
        .iter()
        .map(|&i| u.heap.int(i).unwrap())
        .collect();
    assert_eq!(t, [1, -2, 300, 70000, -5_000_000_000]);
    assert_eq!(u.heap.get(field(&u, u.root, "f")), &Node::Float(2.5));
    assert_eq!(u.heap.str(field(&u, u.root, "s")), Some("héllo"));
    assert_eq!(u.heap.get(field(&u, u.root, "n")), &Node::None);
    assert_eq!(u.heap.get(field(&u, u.root, "y")), &Node::Bool(true));
    assert_eq!(u.heap.get(field(&u, u.root, "z")), &Node::Bool(false));
    assert!(u.unsafe_globals.is_empty());
}

#[test]
fn protocol_0_text_opcodes() {
    let u = run(&hex(TEXT_P0)).unwrap();
    let a = u.heap.seq(field(&u, u.root, "a")).unwrap().to_vec();
    assert_eq!(u.heap.int(a[0]), Some(1));
    assert_eq!(u.heap.get(a[1]), &Node::Float(2.5));
    assert_eq!(u.heap.str(a[3]), Some("é\u{1234}"));
    assert_eq!(u.heap.u64s(a[4]), Some(vec![1, 2]));
    assert_eq!(u.heap.get(field(&u, u.root, "b")), &Node::Bool(true));
    assert_eq!(u.heap.int(field(&u, u.root, "neg")), Some(-3));
    // 2**70 does not fit 64 bits; protocol 0 writes it as a LONG literal, read as the
    // shortest two's complement, as LONG1 carries it (`pickle.encode_long`).
    let mut big = vec![0u8; 8];
    big.push(0x40);
    assert_eq!(
        u.heap.get(field(&u, u.root, "big")),
        &Node::BigInt(big.into())
    );
    assert_eq!(
        u.heap.get(field(&u, u.root, "by")),
        &Node::Bytes(b"ab"[..].into())
    );
    assert!(u.unsafe_globals.is_empty(), "{:?}", u.unsafe_globals);
}

#[test]
fn protocol_4_and_5_framing_memoize_and_stack_global() {
    let u = run(&p4()).unwrap();
    let entries = dict(&u, u.root);
    let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["k", "fs", "b", "long"]);
    assert!(matches!(u.heap.get(entries[0].1), Node::Set(items) if items.len() == 2));
    assert!(matches!(u.heap.get(entries[1].1), Node::Set(items) if items.len() == 1));
    assert_eq!(u.heap.get(entries[2].1), &Node::Bytes([0, 0xff].into()));
    assert_eq!(u.heap.str(entries[3].1).map(str::len), Some(300));

    let u = run(&hex(P5)).unwrap();
    assert_eq!(
        u.heap.get(field(&u, u.root, "ba")),
        &Node::Bytes(b"xyz"[..].into())
    );
    assert_eq!(
        u.heap.u64s(field(&u, u.root, "l")),
        Some(vec![0, 1, 2, 3, 4])
    );
}

/// `pickle.dump` ends each frame where an opcode ends and begins the next with FRAME (every
/// stream over 64 KiB at protocol 4): each frame's bytes are read as they were written, the
/// next FRAME's length from after its opcode, and no framing is found amiss.
#[test]
fn a_stream_of_several_frames_reads_as_pickle_dump_wrote_it() {
    let frame = |body: &[u8]| {
        let mut framed = vec![0x95];
        framed.extend_from_slice(&(body.len() as u64).to_le_bytes());
        framed.extend_from_slice(body);
        framed
    };
    let mut bytes = vec![0x80, 4];
    bytes.extend(frame(b"]\x94("));
    bytes.extend(frame(b"\x8c\x01a\x94\x8c\x01b\x94"));
    bytes.extend(frame(b"e."));
    let u = run(&bytes).expect("several frames");
    let items = u.heap.seq(u.root).expect("a list").to_vec();
    let strings: Vec<&str> = items.iter().filter_map(|&i| u.heap.str(i)).collect();
    assert_eq!(strings, ["a", "b"]);
}

#[test]
fn unsafe_globals_are_recorded_and_never_called() {
    for (stream, position) in [(EVIL_P2, 30), (EVIL_P4, 47)] {
        let u = run(&hex(stream)).unwrap();
        assert_eq!(
            u.unsafe_globals,
            [UnsafeGlobal {
                module: "posix".into(),
                name: "system".into(),
                member: "data.pkl".into(),
                position,
                // The hash of the whole stream that makes the call.
                payload: crate::unsafe_global::sha256_hex(&hex(stream)),
            }]
        );
        // Reading goes on: the payload is an opaque object beside the ordinary value.
        assert_eq!(u.heap.int(field(&u, u.root, "w")), Some(1));
        let payload = field(&u, u.root, "payload");
        let Node::Object(object) = u.heap.get(payload) else {
            panic!("payload is not opaque");
        };
        assert_eq!(
            u.heap.get(object.class),
            &Node::Global(Box::new(Global::new("posix", "system")))
        );
        assert_eq!(
            u.heap.str(u.heap.seq(object.args).unwrap()[0]),
            Some("echo hi")
        );
    }
}

/// `(module, name)` of every unsafe global a stream records under `loader`.
fn unsafe_names(bytes: &[u8], loader: Loader) -> Vec<(String, String)> {
    let u = run_with(bytes, loader, &Budget::default()).unwrap();
    u.unsafe_globals
        .into_iter()
        .map(|g| (g.module, g.name))
        .collect()
}

/// Hand-written streams: a dotted STACK_GLOBAL past an allowlisted name, a GLOBAL line
/// ending in `\r`, and a TorchScript class name, each read by both loaders.
#[test]
fn globals_are_judged_whole_and_by_the_loader_that_would_read_them() {
    // PROTO 4, SHORT_BINUNICODE module, SHORT_BINUNICODE name, STACK_GLOBAL, STOP.
    let stack_global = |module: &str, name: &str| {
        let mut b = vec![0x80, 4];
        for s in [module, name] {
            b.push(0x8c);
            b.push(s.len() as u8);
            b.extend(s.as_bytes());
        }
        b.extend(b"\x93.");
        b
    };
    let owned = |m: &str, n: &str| vec![(m.to_owned(), n.to_owned())];
    let dotted = stack_global("torch.jit._pickle", "build_intlist.__globals__");
    for loader in [Loader::Python, Loader::TorchScript] {
        assert_eq!(
            unsafe_names(&dotted, loader),
            owned("torch.jit._pickle", "build_intlist.__globals__")
        );
        assert_eq!(
            unsafe_names(b"ctorch._utils\n_rebuild_tensor_v2\r\n.", loader),
            owned("torch._utils", "_rebuild_tensor_v2\r")
        );
        assert!(unsafe_names(b"ctorch._utils\n_rebuild_tensor_v2\n.", loader).is_empty());
    }
    let plain = stack_global("torch.jit._pickle", "build_intlist");
    assert_eq!(
        unsafe_names(&plain, Loader::Python),
        owned("torch.jit._pickle", "build_intlist")
    );
    assert!(unsafe_names(&plain, Loader::TorchScript).is_empty());
    let class = b"c__torch__\nEvil\n.";
    assert_eq!(
        unsafe_names(class, Loader::Python),
        owned("__torch__", "Evil")
    );
    assert!(unsafe_names(class, Loader::TorchScript).is_empty());
    assert!(
        run_with(class, Loader::TorchScript, &Budget::default())
            .unwrap()
            .torchscript_classes
    );
}

#[test]
fn self_referencing_containers_are_built_without_copying() {
    let u = run(&hex(CYCLE)).unwrap();
    assert_eq!(u.heap.seq(u.root), Some(&[u.root][..]));
}

/// Opcodes none of the CPython streams above use.
#[test]
fn instances_extensions_persistent_ids_and_stack_ops() {
    let bytes = [
        &b"\x80\x02("[..],
        b"(X\x02\x00\x00\x00hiios\nsystem\n", // INST os.system('hi')
        b"(c__main__\nNet\nK\x01o",           // OBJ __main__.Net(1)
        b"ccollections\nOrderedDict\n)}\x92", // NEWOBJ_EX, kwargs dropped
        b"\x82\x07",                          // EXT1 7
        b"Pkey\nK\x05Q",                      // PERSID 'key', BINPERSID 5
        b"c__main__\nNet\n)\x81K\x09b",       // NEWOBJ, then BUILD with state 9
        b"(NN1K\x022\x98t.",                  // POP_MARK, DUP, READONLY_BUFFER
    ]
    .concat();
    let at = |pat: &[u8]| bytes.windows(pat.len()).position(|w| w == pat).unwrap() as u64;
    let last_at = |pat: &[u8]| bytes.windows(pat.len()).rposition(|w| w == pat).unwrap() as u64;
    let u = run(&bytes).unwrap();
    let items = u.heap.seq(u.root).unwrap().to_vec();
    assert_eq!(items.len(), 9);

    let object = |id: Id| match u.heap.get(id) {
        Node::Object(object) => (
            u.heap.get(object.class).clone(),
            u.heap.seq(object.args).unwrap().to_vec(),
            object.state,
        ),
        other => panic!("not an object: {other:?}"),
    };
    let global = |module: &str, name: &str| Node::Global(Box::new(Global::new(module, name)));
    let (class, args, state) = object(items[0]);
    assert_eq!(class, global("os", "system"));
    assert_eq!(u.heap.str(args[0]), Some("hi"));
    assert_eq!(state, None);
    let (class, args, _) = object(items[1]);
    assert_eq!(
        (class, u.heap.int(args[0])),
        (global("__main__", "Net"), Some(1))
    );
    assert_eq!(u.heap.get(items[2]), &Node::Dict(Default::default()));
    assert_eq!(u.heap.get(items[3]), &global("copyreg", "extension code 7"));
    let pid = |id: Id| match u.heap.get(id) {
        Node::Persistent(pid) => *pid,
        other => panic!("not a persistent id: {other:?}"),
    };
    assert_eq!(u.heap.str(pid(items[4])), Some("key"));
    assert_eq!(u.heap.int(pid(items[5])), Some(5));
    assert_eq!(u.persistent, [items[4], items[5]]);
    let (class, args, state) = object(items[6]);
    assert_eq!((class, args.len()), (global("__main__", "Net"), 0));
    assert_eq!(state.and_then(|s| u.heap.int(s)), Some(9));
    assert_eq!((items[7], u.heap.int(items[8])), (items[8], Some(2)));

    let unsafe_globals: Vec<(&str, &str, u64)> = u
        .unsafe_globals
        .iter()
        .map(|g| (g.module.as_str(), g.name.as_str(), g.position))
        .collect();
    assert_eq!(
        unsafe_globals,
        [
            ("os", "system", at(b"ios\n")),
            ("__main__", "Net", at(b"c__main__")),
            ("copyreg", "extension code 7", at(b"\x82")),
            ("__main__", "Net", last_at(b"c__main__")),
        ]
    );
}

#[test]
fn every_truncation_is_an_error() {
    for bytes in all_streams() {
        for len in 0..bytes.len() {
            let err = run(&bytes[..len]).expect_err("a truncated stream");
            assert!(
                err.to_string().starts_with("t.pkl: data.pkl at byte "),
                "{err}"
            );
        }
    }
}

#[test]
fn malformed_streams_name_the_opcode_position() {
    let cases: &[(&[u8], &str)] = &[
        (b"\x80\x02\xff.", "data.pkl at byte 2: unknown opcode 0xff"),
        (
            b"\x80\x09N.",
            "data.pkl at byte 0: unsupported pickle protocol 9",
        ),
        (b"0.", "data.pkl at byte 0: stack underflow"),
        (b"(0.", "data.pkl at byte 1: stack underflow"),
        (b"h\x05.", "data.pkl at byte 0: memo key 5 was never stored"),
        (
            b"X\xff\xff\xff\x7fab.",
            "data.pkl at byte 0: operand of 2147483647 bytes runs past the end",
        ),
        (b"]K\x01s.", "data.pkl at byte 3: stack underflow"),
        (
            b"NK\x01K\x02s.",
            "data.pkl at byte 5: SETITEM on a value that is not a dict or object",
        ),
        (
            b"}K\x01a.",
            "data.pkl at byte 3: APPEND/ADDITEMS on a value that is not a list, set or object",
        ),
        (
            b"\x8e\xff\xff\xff\xff\xff\xff\xff\xff.",
            "operand of 18446744073709551615 bytes",
        ),
        (b"N", "stream ends without STOP"),
    ];
    for (bytes, expected) in cases {
        let err = run(bytes).expect_err("malformed").to_string();
        assert!(err.contains(expected), "{err} lacks {expected}");
    }
}

#[test]
fn budgets_bound_hostile_streams() {
    // None, the bools and small ints are made once and shared, like memoized values.
    let shared = run(b"NNK\x01\x88\x88NK\x01\x89.").unwrap();
    assert_eq!(shared.heap.len(), 4);
    // Opcodes bound the time a stream takes: a fixed limit, not judged.
    let tight = Budget {
        max_ops: 5,
        ..Budget::default()
    };
    let err = run_with(b"N0N0N0N0.", Loader::Python, &tight).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("more than 5 opcodes, a fixed limit of tensorplay's pickle reader"),
        "{err}"
    );
    assert_eq!(err.kind(), crate::ErrorKind::OverBudget);
}

/// The stack, the marks and the memo are charged as allocated, not by what they count: a
/// memo key a thousand slots past the last leaves a thousand empty slots (a 2 MB stream once
/// took 2.9 GB under a 64 MiB budget), a MARK holds a word. No count limits them, so a stream
/// of a million tensors' memo (8 million keys) is read whole.
#[test]
fn the_stack_marks_and_memo_are_charged_as_allocated() {
    let tight = Budget {
        max_memory: 1 << 20,
        ..Budget::default()
    };
    let mut gaps = b"N".to_vec();
    for i in 1..=300u32 {
        gaps.push(b'r');
        gaps.extend((i * 1023).to_le_bytes());
    }
    gaps.push(b'.');
    let mut marks = vec![b'('; 200_000];
    marks.extend(b"N.");
    let mut stack = vec![b'N'; 300_000];
    stack.push(b'.');
    for (what, stream) in [("gaps", &gaps), ("marks", &marks), ("stack", &stack)] {
        let err = run_with(stream, Loader::Python, &tight).unwrap_err();
        assert!(
            matches!(err, crate::Error::MemoryBudget { limit, .. } if limit == 1 << 20),
            "{what}: {err}"
        );
        // Each fits a budget of ten times its size.
        let roomy = Budget {
            max_memory: 16 << 20,
            ..tight
        };
        let read = run_with(stream, Loader::Python, &roomy);
        assert!(read.is_ok(), "{what}: {:?}", read.err());
    }
    // An object's items, appended one at a time: its list as allocated (doubled, and the
    // lists it outgrew) counts, where its items alone once did (a third of it).
    let mut items = b"cbuiltins\nobject\n)RNq\x010".to_vec();
    for _ in 0..80_000 {
        items.extend(b"h\x01a");
    }
    items.push(b'.');
    let err = run_with(&items, Loader::Python, &tight)
        .unwrap_err()
        .to_string();
    // Refused growing past 32 768 items (each 12 bytes): at the 32 769th APPEND.
    let at = 23 + 32_768 * 3 + 2;
    assert!(
        err.contains(&format!(
            "for the values pickle data.pkl builds (at byte {at})"
        )),
        "{err}"
    );
    // 8 000 001 keys of one value: past the memo's old limit of 8 000 000.
    let mut memo = b"N".to_vec();
    for key in 0..=8_000_000u32 {
        memo.push(b'r');
        memo.extend(key.to_le_bytes());
    }
    memo.push(b'.');
    run(&memo).expect("a million tensors' memo fits the default budget");
}

/// Values are counted in bytes: a list grown by appending one memoized value again and again
/// costs an id per item, a string its length, whatever the node count allows; the bytes the read
/// already holds count too.
#[test]
fn values_are_counted_in_bytes_against_the_memory_budget() {
    // A list of one memoized None 4096 times over: ] N q0 0 ( h0 h0 ... e .
    let mut list = b"]Nq\x000(".to_vec();
    for _ in 0..4096 {
        list.extend(b"h\x00");
    }
    list.extend(b"e.");
    let tight = Budget {
        max_memory: 8 << 10,
        ..Budget::default()
    };
    let err = run_with(&list, Loader::Python, &tight).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, crate::Error::MemoryBudget { limit, .. } if limit == 8 << 10),
        "{text}"
    );
    assert!(
        text.starts_with("t.pkl: exceeds the memory budget (--max-memory): the read would hold ")
            && text.contains("more than the 8.0 KiB (8192 bytes) allowed, for the values pickle"),
        "{text}"
    );
    run_with(&list, Loader::Python, &Budget::default()).expect("fits the default");

    // One 6000-byte string fits 8 KiB alone, not beside 4 KiB already held.
    let mut string = b"X\x70\x17\x00\x00".to_vec();
    string.extend(std::iter::repeat_n(b'a', 6000));
    string.push(b'.');
    run_with(&string, Loader::Python, &tight).expect("fits");
    let held = Budget {
        memory_held: 4 << 10,
        ..tight
    };
    let err = run_with(&string, Loader::Python, &held).unwrap_err();
    assert!(matches!(err, crate::Error::MemoryBudget { .. }), "{err}");
}

/// Protocol 0 `_rebuild_tensor_v2(P0, 0, (2,), (1,), False, {}[, metadata])`, as text.
fn tensor_v2(metadata: &str) -> String {
    format!("ctorch._utils\n_rebuild_tensor_v2\n(P0\nI0\n(I2\nt(I1\ntI00\n(d{metadata}tR")
}

fn spec(u: &Unpickled, id: Id) -> &TensorSpec {
    match u.heap.get(id) {
        Node::Tensor(spec) => spec,
        other => panic!("not a tensor: {other:?}"),
    }
}

#[test]
fn the_conj_and_neg_bits_come_from_the_metadata_and_an_unknown_bit_is_an_error() {
    let u = run(format!("{}.", tensor_v2("(dVconj\nI01\ns")).as_bytes()).expect("conj");
    assert!(spec(&u, u.root).is_conj && !spec(&u, u.root).is_neg);
    let u = run(format!("{}.", tensor_v2("(dVneg\nI01\ns")).as_bytes()).expect("neg");
    assert!(spec(&u, u.root).is_neg && !spec(&u, u.root).is_conj);
    let u = run(format!("{}.", tensor_v2("")).as_bytes()).expect("plain");
    assert!(!spec(&u, u.root).is_conj && !spec(&u, u.root).is_neg);
    let err = run(format!("{}.", tensor_v2("(dVzap\nI01\ns")).as_bytes()).unwrap_err();
    assert!(
        err.to_string().contains("unknown metadata key zap"),
        "{err}"
    );
}

#[test]
fn a_sparse_tensor_is_a_composite_of_its_components_and_an_unknown_layout_is_an_error() {
    let t = tensor_v2("");
    let coo = format!(
        "ctorch._utils\n_rebuild_sparse_tensor\n(Vtorch.sparse_coo\n({t}{t}(I2\nI3\ntI01\nttR."
    );
    let u = run(coo.as_bytes()).expect("coo");
    let Node::Composite(c) = u.heap.get(u.root) else {
        panic!("not a composite");
    };
    assert_eq!(
        (c.layout, c.sizes.as_deref()),
        ("sparse_coo", Some(&[2, 3][..]))
    );
    let roles: Vec<&str> = c.components.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(roles, ["indices", "values"]);
    let csc = format!(
        "ctorch._utils\n_rebuild_sparse_tensor\n(Vtorch.sparse_csc\n({t}{t}{t}(I2\nI3\ntttR."
    );
    let u = run(csc.as_bytes()).expect("csc");
    let Node::Composite(c) = u.heap.get(u.root) else {
        panic!("not a composite");
    };
    let roles: Vec<&str> = c.components.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(roles, ["ccol_indices", "row_indices", "values"]);
    let odd =
        format!("ctorch._utils\n_rebuild_sparse_tensor\n(Vtorch.sparse_xyz\n({t}{t}(I2\ntttR.");
    let err = run(odd.as_bytes()).unwrap_err();
    assert!(
        err.to_string().contains("unknown layout sparse_xyz"),
        "{err}"
    );
    // A component that is not a tensor is refused, not skipped.
    let bad = "ctorch._utils\n_rebuild_sparse_tensor\n(Vtorch.sparse_coo\n(I1\nI2\n(I2\ntttR.";
    let err = run(bad.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("indices is not a tensor"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn random_streams_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = run(&bytes);
    }

    #[test]
    fn mutated_real_streams_never_panic(
        pick in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let streams = all_streams();
        let mut bytes = pick.get(&streams).clone();
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let _ = run(&bytes);
    }
}

/// A stream of a million tensors makes millions of values: each stays 24 bytes.
#[test]
#[cfg(target_pointer_width = "64")]
fn values_stay_24_bytes() {
    assert_eq!(std::mem::size_of::<Node>(), 24);
}

/// Protocol 4 streams calling `os.system` whose FRAME lengths agree or disagree with their
/// opcodes, and what CPython 3.11's C unpickler (`pickle.Unpickler`) and pure-Python one
/// (`pickle._Unpickler`) did with each.
#[test]
fn frames_are_read_as_the_c_unpickler_reads_them_and_disagreements_refused() {
    let names_system =
        |u: &[UnsafeGlobal]| u.iter().any(|g| g.module == "os" && g.name == "system");
    // Both unpicklers: ok.
    let agrees = hex("80049516000000000000008c026f738c0673797374656d938c047472756585522e");
    assert!(names_system(
        &run(&agrees)
            .expect("framed as pickle.dump frames")
            .unsafe_globals
    ));
    // A 5-byte frame that an operand runs past (both load it, reading across it), and a frame
    // inside a frame (C: ok; pure Python: "beginning of a new frame before end of current
    // frame"): refused, naming the global the C unpickler resolves.
    for stream in [
        "80049505000000000000008c026f738c0673797374656d938c047472756585522e",
        "8004951f000000000000009516000000000000008c026f738c0673797374656d938c047472756585522e",
    ] {
        let error = run(&hex(stream)).expect_err(stream);
        assert!(error.to_string().contains("FRAME"), "{error}");
        assert!(names_system(error.unsafe_globals()), "{stream}: {error}");
    }
    // A frame longer than the stream: the C unpickler refuses it at once ("pickle data was
    // truncated"), but the pure-Python one (joblib.load's) reads what there is and runs the
    // call: refused, naming it.
    let long = hex("80049517000000000000008c026f738c0673797374656d938c047472756585522e");
    let error = run(&long).expect_err("frame past the end");
    assert!(
        error
            .to_string()
            .contains("runs past the end of the stream"),
        "{error}"
    );
    assert!(names_system(error.unsafe_globals()), "{error}");
}

/// The names of the globals a refused stream names.
fn named_by_refusal(stream: &[u8]) -> Vec<String> {
    let error = run(stream).expect_err("refused at its end");
    error
        .unsafe_globals()
        .iter()
        .map(|g| format!("{}.{}", g.module, g.name))
        .collect()
}

/// An INST whose name line runs past its frame's end: reading from a file without `peek`
/// (`io.BytesIO`, as torch.load reads a zip's pickle), the C unpickler drops the part of the
/// line the frame held; holding the whole stream (`pickle.loads`, a small file torch.load
/// opens) it reads the line whole. The refusal names both.
#[test]
fn a_line_across_a_frame_end_is_read_as_either_c_reading_reads_it() {
    for (frame, name) in [(17, "os.em"), (18, "os.m")] {
        let mut stream = hex("80049500000000000000002853277472756527");
        stream[3] = frame;
        stream.extend_from_slice(b"\nios\nsystem\n.");
        assert_eq!(named_by_refusal(&stream), [name, "os.system"]);
    }
}

/// A FRAME inside a frame's bytes only rewinds the C unpickler's buffer: the line its end
/// cuts is still whole in the outer frame (CPython reads `os.system` either way).
#[test]
fn a_frame_inside_a_frame_leaves_the_buffer_as_it_was() {
    let mut stream = b"\x80\x04\x95\x1d\x00\x00\x00\x00\x00\x00\x00".to_vec();
    stream.extend_from_slice(b"\x95\x11\x00\x00\x00\x00\x00\x00\x00(S'true'\nios\nsystem\n.");
    assert_eq!(named_by_refusal(&stream), ["os.system"]);
}

/// A FRAME that runs past the frame it begins in is read, buffered, from that frame's end,
/// skipping the bytes between; holding the whole stream, the C unpickler reads them. CPython
/// 3.11 resolves `posix.system` from `io.BytesIO`, `os.system` then `posix.system` from a file.
#[test]
fn a_frame_past_its_enclosing_frame_is_read_from_that_frames_end() {
    let (skipped, tail): (&[u8], &[u8]) = (b"cos\nsystem\n", b"cposix\nsystem\n)R.");
    let mut stream = b"\x80\x04\x95".to_vec();
    stream.extend_from_slice(&(9 + skipped.len() as u64).to_le_bytes());
    stream.push(0x95);
    stream.extend_from_slice(&(tail.len() as u64).to_le_bytes());
    stream.extend_from_slice(skipped);
    stream.extend_from_slice(tail);
    assert_eq!(named_by_refusal(&stream), ["posix.system", "os.system"]);
}

/// A frame inside a frame that runs past the stream, read buffered from the outer frame's
/// end: C from `io.BytesIO` fails there ("pickle data was truncated"), from a file it reads
/// on to `os.system`. The refusal names it.
#[test]
fn a_frame_only_the_buffered_reading_cannot_read_names_what_the_other_reads() {
    let mut stream = b"\x80\x04\x95\x14\x00\x00\x00\x00\x00\x00\x00".to_vec();
    stream.extend_from_slice(b"\x95\x16\x00\x00\x00\x00\x00\x00\x00");
    stream.extend_from_slice(b"\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R.");
    assert_eq!(named_by_refusal(&stream), ["os.system"]);
}

/// An operand that runs past its frame's end: buffered, the C unpickler reads it afresh from
/// the frame's end (here not UTF-8, so that reading fails); from a file it reads `os.system`.
/// The refusal names what the file reading resolves.
#[test]
fn an_operand_across_a_frame_end_is_read_both_ways() {
    let stream = b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R.";
    let error = run(stream).expect_err("refused");
    assert!(error.to_string().contains("not valid UTF-8"), "{error}");
    assert_eq!(named_by_refusal(stream), ["os.system"]);
}

#[test]
fn a_dict_that_sets_one_key_twice_is_refused() {
    // `{'a': 1, 'b': 2}` then SETITEM 'a' again, and a DICT holding 1 and 1.0: Python keeps
    // the last value of each.
    let setitem =
        b"\x80\x02}(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00bK\x02uX\x01\x00\x00\x00aK\x03s.";
    let e = run(setitem).unwrap_err();
    assert!(matches!(e, crate::Error::RepeatedKey { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "t.pkl: data.pkl: a dict sets the key 'a' twice (pickle keeps the last value)"
    );
    let numbers = b"\x80\x02(K\x01NG?\xf0\x00\x00\x00\x00\x00\x00Nd.";
    assert!(run(numbers)
        .unwrap_err()
        .to_string()
        .contains("key 1.0 twice"));
    // A refusal names the globals read before it.
    let with_global = b"\x80\x02}(cposix\nsystem\nK\x01cposix\nsystem\nK\x02u.";
    let e = run(with_global).unwrap_err();
    assert!(
        matches!(e, crate::Error::RefusedWithUnsafeGlobals { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("key posix.system twice"), "{e}");
    // Distinct keys, and every stream CPython wrote, still read.
    assert!(run(b"\x80\x02}(K\x01N\x8a\x01\x02NX\x01\x00\x00\x001Nu.").is_ok());
    for bytes in all_streams() {
        assert!(run(&bytes).is_ok());
    }
}

#[test]
fn a_second_build_on_one_object_is_refused() {
    // NEWOBJ, BUILD {'a': 1}, BUILD {'b': 2}: Python's object ends with both fields.
    let twice = b"\x80\x02cm\nC\n)\x81}X\x01\x00\x00\x00aK\x01sb}X\x01\x00\x00\x00bK\x02sb.";
    let e = run(twice).unwrap_err().to_string();
    assert!(
        e.contains("BUILD sets the state of one object twice"),
        "{e}"
    );
    assert!(e.contains("m.C"), "{e}");
    let once = b"\x80\x02cm\nC\n)\x81}X\x01\x00\x00\x00aK\x01sb.";
    assert!(run(once).is_ok());
}

/// A tensor rebuilt over what an unsafe global returns (`torch.storage._load_from_bytes` of
/// a string, not the bytes `pickle.dumps(tensor)` gives it): Python calls the real functions
/// and runs on, so the machine reads on too, naming the call that follows, and refuses the
/// stream at its end.
#[test]
fn a_call_tensorplay_cannot_interpret_is_read_past_and_refused_at_the_end() {
    let mut stream = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(ctorch.storage\n_load_from_bytes\nX\x01\x00\x00\x00x\x85RK\x00K\x01\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR".to_vec();
    stream.extend_from_slice(b"0cos\nsystem\nX\x04\x00\x00\x00true\x85R.");
    let error = run(&stream).expect_err("refused");
    assert!(error.to_string().contains("tensor rebuild"), "{error}");
    let named: Vec<String> = error
        .unsafe_globals()
        .iter()
        .map(|g| format!("{}.{}", g.module, g.name))
        .collect();
    assert_eq!(named, ["torch.storage._load_from_bytes", "os.system"]);
}

/// `torch.save(storage, _use_new_zipfile_serialization=False)` of a `FloatStorage` keyed `key`
/// of `numel` elements, followed by `data`: what `Storage.__reduce__` hands
/// `torch.storage._load_from_bytes` (the three header pickles as torch 2.9 writes them).
fn legacy_storage(main: &[u8], keys: &[u8], count: u64, data: &[u8]) -> Vec<u8> {
    let mut b =
        b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02M\xe9\x03.".to_vec();
    b.extend_from_slice(b"\x80\x02}q\x00(X\x10\x00\x00\x00protocol_versionq\x01M\xe9\x03X\r\x00\x00\x00little_endianq\x02\x88X\n\x00\x00\x00type_sizesq\x03}q\x04(X\x05\x00\x00\x00shortq\x05K\x02X\x03\x00\x00\x00intq\x06K\x04X\x04\x00\x00\x00longq\x07K\x04uu.");
    b.extend_from_slice(main);
    b.extend_from_slice(keys);
    b.extend_from_slice(&count.to_le_bytes());
    b.extend_from_slice(data);
    b
}

/// The main pickle of a storage saved alone: its persistent id, `('storage', FloatStorage,
/// 'k', 'cpu', numel, None)`.
fn storage_pid(numel: u8) -> Vec<u8> {
    let mut b = b"\x80\x02(X\x07\x00\x00\x00storageq\x00ctorch\nFloatStorage\nq\x01X\x01\x00\x00\x00kq\x02X\x03\x00\x00\x00cpuq\x03K".to_vec();
    b.extend_from_slice(&[numel]);
    b.extend_from_slice(b"Ntq\x04Q.");
    b
}

const KEYS: &[u8] = b"\x80\x02]q\x00X\x01\x00\x00\x00kq\x01a.";

/// `{'w': _rebuild_tensor_v2(_load_from_bytes(payload), 0, (3,), (1,), False, OrderedDict())}`,
/// as `pickle.dumps({'w': tensor})` writes it (protocol 2's text globals, for brevity).
fn tensor_over_bytes(payload: &[u8]) -> Vec<u8> {
    let mut b = b"\x80\x02}X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n(ctorch.storage\n_load_from_bytes\nB".to_vec();
    b.extend_from_slice(&u32::try_from(payload.len()).expect("short").to_le_bytes());
    b.extend_from_slice(payload);
    b.extend_from_slice(b"\x85RK\x00K\x03\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRs.");
    b
}

fn floats(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `pickle.dumps(tensor)`'s storage, a legacy `torch.save` handed to
/// `torch.storage._load_from_bytes`: the machine makes it a storage over those bytes, which the
/// tensor's rebuild takes, and the call stays an unsafe global; the loader reads the bytes as
/// the storage's elements.
#[test]
fn a_storage_handed_to_load_from_bytes_is_read_as_data() {
    let data = floats(&[0.0, 1.0, 2.0]);
    let stream = tensor_over_bytes(&legacy_storage(&storage_pid(3), KEYS, 3, &data));
    let u = run(&stream).expect("read");
    assert_eq!(u.bytes_storages.len(), 1);
    assert!(u.persistent.is_empty(), "no persistent id is loaded");
    let storage = u.bytes_storages[0].node;
    match u.heap.get(field(&u, u.root, "w")) {
        Node::Tensor(spec) => assert_eq!(spec.storage, Some(storage)),
        other => panic!("not a tensor: {other:?}"),
    }
    let named: Vec<String> = u
        .unsafe_globals
        .iter()
        .map(|g| format!("{}.{}", g.module, g.name))
        .collect();
    assert_eq!(named, ["torch.storage._load_from_bytes"]);

    let buffer = crate::HostBuffer::from_vec("t.pkl", stream);
    let checkpoint = crate::load::from_buffer(buffer).expect("loads");
    let [w] = &checkpoint.tensors[..] else {
        panic!("{:?}", checkpoint.tensors);
    };
    assert_eq!(w.name(), "w");
    assert_eq!(w.tensor_impl().dtype(), crate::DType::Float32);
    assert_eq!(w.tensor_impl().view_bytes(), Some(&data[..]));
    let key = checkpoint.storages[0].key();
    assert!(key.starts_with("_load_from_bytes@"), "{key}");
    let named: Vec<&str> = checkpoint
        .unsafe_globals
        .iter()
        .map(|g| g.name.as_str())
        .collect();
    assert_eq!(named, ["_load_from_bytes"]);

    // Two calls given one byte string (memoized): two storages, as Python makes two, each
    // over the bytes read once.
    let payload = legacy_storage(&storage_pid(3), KEYS, 3, &data);
    let head = b"ctorch._utils\n_rebuild_tensor_v2\n(ctorch.storage\n_load_from_bytes\n";
    let tail = b"\x85RK\x00K\x03\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRs";
    let mut twice = b"\x80\x02}X\x01\x00\x00\x00w".to_vec();
    twice.extend_from_slice(head);
    twice.push(b'B');
    twice.extend_from_slice(&u32::try_from(payload.len()).expect("short").to_le_bytes());
    twice.extend_from_slice(&payload);
    twice.extend_from_slice(b"q\x00");
    twice.extend_from_slice(tail);
    twice.extend_from_slice(b"X\x01\x00\x00\x00v");
    twice.extend_from_slice(head);
    twice.extend_from_slice(b"h\x00");
    twice.extend_from_slice(tail);
    twice.push(b'.');
    let buffer = crate::HostBuffer::from_vec("t.pkl", twice.clone());
    let checkpoint = crate::load::from_buffer(buffer).expect("loads");
    assert_eq!(checkpoint.tensors.len(), 2);
    for t in &checkpoint.tensors {
        assert_eq!(
            t.tensor_impl().view_bytes(),
            Some(&data[..]),
            "{}",
            t.name()
        );
    }
    let keys: Vec<&str> = checkpoint.storages.iter().map(|s| s.key()).collect();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1]);

    // `torch.jit.load`'s unpickler resolves no such global: no storage is made there, and
    // the rebuild over the call's opaque value is refused.
    let jit = run_with(&twice, Loader::TorchScript, &Budget::default()).expect_err("refused");
    assert!(jit.to_string().contains("tensor rebuild"), "{jit}");
}

/// Bytes handed to `_load_from_bytes` that are not one storage alone, each as a legacy stream
/// would be cut or padded: the file is refused (never a panic, never a tensor over bytes that
/// are not the storage's), naming the call and whatever the bytes name.
#[test]
fn a_malformed_load_from_bytes_payload_fails_closed() {
    let data = floats(&[0.0, 1.0, 2.0]);
    let good = legacy_storage(&storage_pid(3), KEYS, 3, &data);
    let two_keys = b"\x80\x02]q\x00(X\x01\x00\x00\x00kq\x01X\x01\x00\x00\x00jq\x02e.";
    let evil_main = b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00trueq\x00\x85R.";
    let huge = legacy_storage(&storage_pid(3), KEYS, u64::MAX, &data);
    // `(pid, pid)`: the tuple of two persistent ids, of one storage, in place of one.
    let pid = storage_pid(3);
    let body = &pid[2..pid.len() - 1];
    // An object built by a call, no storage after the (empty) key list.
    let mut evil = legacy_storage(evil_main, b"\x80\x02].", 0, b"");
    evil.truncate(evil.len() - 8);
    let two_pids = [b"\x80\x02", body, body, b"\x86."].concat();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "legacy pickle 1"),
        (
            "cut in its data",
            good[..good.len() - 1].to_vec(),
            "run past the end",
        ),
        (
            "a byte after the storage",
            [&good[..], b"\x00"].concat(),
            "after the last storage",
        ),
        ("cut in a pickle", good[..20].to_vec(), "legacy pickle 2"),
        (
            "another magic",
            [b"\x80\x02K\x01.", &good[15..]].concat(),
            "magic number",
        ),
        (
            "a count the pickle does not describe",
            legacy_storage(&storage_pid(2), KEYS, 3, &data),
            "holds 3 elements",
        ),
        (
            "a second storage",
            [
                &legacy_storage(&storage_pid(3), two_keys, 3, &data)[..],
                &3u64.to_le_bytes(),
                &data,
            ]
            .concat(),
            "no tensor names its type",
        ),
        (
            "two storages' ids",
            legacy_storage(&two_pids, KEYS, 3, &data),
            "not a storage's persistent id",
        ),
        ("a count that overflows", huge, "overflow"),
        ("a call for an object", evil, "not one storage alone"),
    ];
    for (what, payload, says) in cases {
        let stream = tensor_over_bytes(&payload);
        let buffer = crate::HostBuffer::from_vec("t.pkl", stream);
        let error = crate::load::from_buffer(buffer).expect_err(what);
        let text = error.to_string();
        assert!(text.contains(says), "{what}: {text}");
        let named: Vec<String> = error
            .unsafe_globals()
            .iter()
            .map(|g| format!("{}.{}", g.module, g.name))
            .collect();
        assert!(
            named.contains(&"torch.storage._load_from_bytes".to_owned()),
            "{what}: {named:?}"
        );
        if what == "a call for an object" {
            assert!(named.contains(&"os.system".to_owned()), "{named:?}");
            let inner = error.unsafe_globals().iter().find(|g| g.name == "system");
            let member = inner.map(|g| g.member.as_str()).unwrap_or_default();
            assert!(member.starts_with("<pickle>:_load_from_bytes@"), "{member}");
        }
    }
}

/// A lone surrogate, which Python's pickle keeps (`surrogatepass`) and torch loads, is read
/// and written out visibly; other invalid UTF-8 is refused as Python refuses it.
#[test]
fn a_lone_surrogate_is_read_as_python_reads_it() {
    // {'a\ud800': 'b'} as BINUNICODE, then as protocol 0's UNICODE.
    let binunicode = b"\x80\x02}q\x00X\x04\x00\x00\x00a\xed\xa0\x80q\x01X\x01\x00\x00\x00bs.";
    let unicode = b"(dp0\nVa\\ud800\np1\nVb\np2\ns.";
    for stream in [&binunicode[..], &unicode[..]] {
        let unpickled = run(stream).expect("read");
        let keys: Vec<String> = dict(&unpickled, unpickled.root)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, ["a\\u{d800}"]);
    }
    let invalid = b"\x80\x02X\x02\x00\x00\x00a\xff.";
    assert!(run(invalid)
        .unwrap_err()
        .to_string()
        .contains("not valid UTF-8"));
}

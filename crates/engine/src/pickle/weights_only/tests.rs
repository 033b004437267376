//! Streams and what torch 2.9.1's `_weights_only_unpickler.load(f, encoding="utf-8")` did
//! with each (its exception type and message).

use super::{Budget, Persistent, Verdict};
use crate::pickle::opcodes::{LONG_BINGET, LONG_BINPUT};

/// The replay at the default budget, which no stream here comes near.
fn replay(stream: &[u8], persistent: Persistent) -> Verdict {
    super::replay(stream, persistent, &Budget::default()).expect("within the budget")
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn run(stream: &str) -> Result<(), String> {
    replay(&hex(stream), Persistent::Refused)
}

#[test]
fn streams_torch_reads() {
    for stream in [
        // pickle.dumps(OrderedDict(a=1, b=[1, 2]), protocol=2)
        "800263636f6c6c656374696f6e730a4f726465726564446963740a7100295271012858010000006171024b0158010000006271035d7104284b014b0265752e",
        // OrderedDict() BUILD {}
        "800263636f6c6c656374696f6e730a4f726465726564446963740a29527d622e",
        // [1], then [0] = 2
        "80025d4b01614b004b02732e",
        // SETITEMS with nothing after its MARK, on an int: nothing is assigned
        "80024b0128752e",
        // OrderedDict NEWOBJ
        "800263636f6c6c656374696f6e730a4f726465726564446963740a29812e",
        // UserDict.OrderedDict: torch maps Python 2 names first
        "80026355736572446963740a4f726465726564446963740a29522e",
        // BINUNICODE of an encoded surrogate ("surrogatepass")
        "80025803000000eda0802e",
        // torch.nested's NestedTensor: `import torch` makes it a safe global
        "800263746f7263682e6e65737465642e5f696e7465726e616c2e6e65737465645f74656e736f720a4e657374656454656e736f720a2e",
        // set() BUILD None: a falsy state updates nothing
        "8002636275696c74696e730a7365740a29524e622e",
        // {} MARK 'a' 1 SETITEMS: the dict below the mark takes the items
        "80027d285801000000614b01752e",
        // [] MARK 1 2 APPENDS
        "80025d284b014b02652e",
    ] {
        assert_eq!(run(stream), Ok(()), "{stream}");
    }
}

#[test]
fn streams_torch_refuses_with_its_message() {
    for (stream, message) in [
        // pickle.dumps({"a": 1}, protocol=4): FRAME
        ("8004950a000000000000007d948c0161944b01732e", "Unsupported operand 149"),
        ("80024b01304e2e", "Unsupported operand 48"),
        (
            "8002636f730a73797374656d0a58020000006964710085522e",
            "Trying to load unsupported GLOBAL os.system whose module os is blocked.",
        ),
        (
            "8002635f5f6275696c74696e5f5f0a6576616c0a2e",
            "Unsupported global: GLOBAL eval was not an allowed global by default.",
        ),
        (
            "8002635f5f6275696c74696e5f5f0a696e7465726e0a2e",
            "Trying to load unsupported GLOBAL sys.intern whose module sys is blocked.",
        ),
        (
            "80027d7d622e",
            "Can only build Tensor, Parameter, OrderedDict or types allowlisted via `add_safe_globals`, but got <class 'dict'>",
        ),
        ("80027d4b01612e", "Can only append to lists, but got <class 'dict'>"),
        (
            "800258060000006d6f64756c654b0186512e",
            "Only persistent_load of storage is allowed, but got module",
        ),
        (
            "8002580700000073746f726167654b0186512e",
            "unsupported persistent id encountered",
        ),
        ("80025d4b01614b054b02732e", "IndexError"),
        ("800263746f7263680a666c6f617433320a29522e", "TypeError"),
        (
            "800263746f7263682e5f7574696c730a5f72656275696c645f74656e736f725f76320a29812e",
            "Can only create new object",
        ),
        ("80022e", "IndexError"),
        // Below a MARK nothing can be popped or read: TUPLE1, BUILD's instance, STOP.
        ("80025d28852e", "IndexError: list index out of range"),
        ("80027d287d622e", "IndexError: list index out of range"),
        ("80024b01282e", "IndexError: pop from empty list"),
        ("800268052e", "KeyError: 5"),
        ("80024b01", "EOFError"),
        ("80027d5d4b01732e", "TypeError: unhashable type"),
        ("80025501ff2e", "UnicodeDecodeError"),
        (
            "8002636275696c74696e730a7365740a29527d5801000000614b0173622e",
            "AttributeError",
        ),
    ] {
        let refused = run(stream).expect_err(stream);
        assert!(refused.starts_with(message), "{stream}: {refused}");
    }
}

#[test]
fn a_storage_id_has_the_fields_its_loader_unpacks() {
    // MARK 'storage' GLOBAL <class> '0' 'cpu' 4 [None] TUPLE BINPERSID STOP
    let id = |class: &[u8], view: bool| {
        let mut s = b"\x80\x02(X\x07\x00\x00\x00storagec".to_vec();
        s.extend_from_slice(class);
        s.extend_from_slice(b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04");
        if view {
            s.push(b'N');
        }
        s.extend_from_slice(b"tQ.");
        s
    };
    let float = b"torch\nFloatStorage\n";
    assert_eq!(replay(&id(float, false), Persistent::Zip), Ok(()));
    assert_eq!(replay(&id(float, true), Persistent::Legacy), Ok(()));
    let fields = |e: Result<(), String>, n: usize| {
        let e = e.expect_err("refused");
        assert!(e.contains(&format!("not {n}")), "{e}");
    };
    fields(replay(&id(float, true), Persistent::Zip), 5);
    fields(replay(&id(float, false), Persistent::Legacy), 6);
    assert_eq!(
        replay(&id(float, false), Persistent::Refused),
        Err("unsupported persistent id encountered".into())
    );
    // A dtype where the storage class belongs.
    let dtype = replay(&id(b"torch\nfloat32\n", false), Persistent::Zip).expect_err("a dtype");
    assert!(dtype.starts_with("AttributeError"), "{dtype}");
}

#[test]
fn a_build_state_is_what_the_object_can_take() {
    // OrderedDict() BUILD None: `__dict__.update(None)` is a TypeError.
    let none = "800263636f6c6c656374696f6e730a4f726465726564446963740a29524e622e";
    assert!(run(none).expect_err("BUILD None").starts_with("TypeError"));
    // OrderedDict() BUILD {}: an update.
    assert_eq!(
        run("800263636f6c6c656374696f6e730a4f726465726564446963740a29527d622e"),
        Ok(())
    );
}

#[test]
fn a_storage_takes_a_state_through_its_dict() {
    // ('storage', FloatStorage, '0', 'cpu', 4) BINPERSID, then BUILD {} and BUILD None.
    let mut stream =
        b"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ".to_vec();
    stream.extend_from_slice(b"}bNb.");
    assert_eq!(replay(&stream, Persistent::Zip), Ok(()));
}

/// A tensor's BUILD is `set_(*state)`: torch 2.9.1 loads `slice_alone.pt` with `BUILD {}` on
/// its tensor (no arguments: `set_()`), as the differential harness found.
#[test]
fn an_empty_state_builds_a_tensor() {
    let stream = hex(concat!(
        "800263746f7263682e5f7574696c730a5f72656275696c645f74656e736f725f76320a7100282858070000",
        "0073746f72616765710163746f7263680a466c6f617453746f726167650a71025801000000307103580300",
        "000063707571044de803747105514b004b0a8571064b018571078963636f6c6c656374696f6e730a4f7264",
        "65726564446963740a71082952710974710a52710b7d622e"
    ));
    assert_eq!(replay(&stream, Persistent::Zip), Ok(()));
}

/// Every list the replay keeps is held to what the read's budget leaves: the stack, the
/// marks, the lists' sizes, the memo, and the keys a stream fetches, each grown alone by its
/// stream. Each is refused past a 1 MiB budget (or one the read already holds all but 1 MiB
/// of), and judged within the default.
#[test]
fn the_replay_holds_what_it_keeps_to_the_budget() {
    const N: u32 = 400_000;
    let stream = |parts: &[&dyn Fn(u32) -> Vec<u8>]| {
        let mut stream = b"\x80\x02]".to_vec();
        for part in parts {
            stream.extend((0..N).flat_map(part));
        }
        stream.push(b'.');
        stream
    };
    let key = |op: u8, key: u32| [&[op][..], &key.to_le_bytes()].concat();
    let streams = [
        ("stack", stream(&[&|_| b"N".to_vec()])),
        ("marks", stream(&[&|_| b"(".to_vec()])),
        // Each list appended to the first: only their sizes grow.
        ("sizes", stream(&[&|_| b"]a".to_vec()])),
        // None memoized under each key, then each fetched and appended.
        (
            "memo",
            stream(&[
                &|i| [&b"N"[..], &key(LONG_BINPUT, i), b"a"].concat(),
                &|i| [key(LONG_BINGET, i), b"a".to_vec()].concat(),
            ]),
        ),
        // Keys past the stream's length, which no memo holds.
        (
            "fetched keys",
            stream(&[&|i| key(LONG_BINGET, i | 1 << 31)]),
        ),
    ];
    let small = Budget {
        max_memory: 1 << 20,
        ..Budget::default()
    };
    let held = Budget {
        max_memory: 1 << 30,
        memory_held: (1 << 30) - (1 << 20),
        ..Budget::default()
    };
    for (what, stream) in &streams {
        for budget in [&small, &held] {
            let overrun = super::replay(stream, Persistent::Refused, budget).expect_err(what);
            assert!(overrun.needed > budget.max_memory, "{what}: {overrun:?}");
            assert!(overrun.at < stream.len(), "{what}: {overrun:?}");
        }
        assert!(
            super::replay(stream, Persistent::Refused, &Budget::default()).is_ok(),
            "{what}"
        );
    }
}

mod memo_gets {
    use super::super::{ended, memo_gets, Budget, Machine, Persistent};
    use super::replay;
    use crate::pickle::opcodes::*;
    use proptest::prelude::*;

    /// One opcode with operands the replay reads, memo keys among a few so gets meet puts.
    fn op() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            (0u8..4).prop_map(|k| vec![BINPUT, k]),
            (0u8..4).prop_map(|k| vec![BINGET, k]),
            (0u32..4).prop_map(|k| [&[LONG_BINPUT][..], &k.to_le_bytes()].concat()),
            (0u32..4).prop_map(|k| [&[LONG_BINGET][..], &k.to_le_bytes()].concat()),
            Just(b"ctorch._utils\n_rebuild_tensor_v2\n".to_vec()),
            Just(b"ccollections\nOrderedDict\n".to_vec()),
            Just(b"X\x07\x00\x00\x00storage".to_vec()),
            Just(b"U\x03cpu".to_vec()),
            Just(b"X\xff\x00\x00\x00short".to_vec()),
            Just(vec![BININT1, 7]),
            Just(vec![BININT2, 1, 0]),
            Just(vec![LONG1, 2, 1, 0]),
            Just(vec![PROTO, 2]),
            prop::sample::select(vec![
                MARK,
                TUPLE,
                TUPLE1,
                TUPLE2,
                TUPLE3,
                EMPTY_TUPLE,
                EMPTY_LIST,
                EMPTY_DICT,
                NONE,
                NEWTRUE,
                REDUCE,
                NEWOBJ,
                BUILD,
                APPEND,
                APPENDS,
                SETITEM,
                SETITEMS,
                BINPERSID,
                STOP,
                POP,
            ])
            .prop_map(|b| vec![b]),
        ]
    }

    proptest! {
        /// Memoizing only the keys the stream fetches changes no verdict and no message.
        #[test]
        fn keeping_only_fetched_keys_gives_the_same_verdict(
            ops in prop::collection::vec(op(), 0..40),
            persistent in prop::sample::select(vec![Persistent::Zip, Persistent::Legacy]),
        ) {
            let stream = ops.concat();
            let budget = Budget::default();
            let gets = memo_gets(&stream, &budget).expect("within the budget");
            let every = ended(Machine::new(&stream, persistent, None, &budget).run());
            let fetched = ended(Machine::new(&stream, persistent, Some(gets), &budget).run());
            prop_assert_eq!(every, fetched);
        }

        /// Where the pickle machine reads a stream to its STOP, the keys it fetched give the
        /// replay the verdict and message it gives on its own.
        #[test]
        fn the_machines_fetched_keys_give_the_same_verdict(
            ops in prop::collection::vec(op(), 0..40),
            persistent in prop::sample::select(vec![Persistent::Zip, Persistent::Legacy]),
        ) {
            let stream = ops.concat();
            let budget = Budget::default();
            let read = crate::pickle::unpickle(
                &stream,
                std::path::Path::new("t.pt"),
                "data.pkl",
                0,
                crate::pickle::Loader::Python,
                &budget,
            );
            if let Ok(unpickled) = read {
                let alone = replay(&stream, persistent);
                let given =
                    super::super::replay_read(&stream, persistent, unpickled.fetched, &budget);
                prop_assert_eq!(Ok(alone), given);
            }
        }
    }
}

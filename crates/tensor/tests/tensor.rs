//! Tensor and TensorMut: constructors, O(1) views, copy-on-write, alignment,
//! allocation failure, mutable row views.

use proptest::prelude::*;
use sheaf_tensor::{DType, Device, Shape, Tensor, TensorError, HOST_ALIGN};

fn iota(shape: impl Into<Shape>) -> Tensor {
    let shape = shape.into();
    let n = shape.numel().unwrap();
    Tensor::from_vec((0..n).map(|i| i as f32).collect(), shape).unwrap()
}

#[test]
fn constructors() {
    let z = Tensor::zeros([2, 3], DType::F32, Device::Cpu).unwrap();
    assert_eq!(z.shape(), Shape::from([2, 3]));
    assert_eq!(z.dtype(), DType::F32);
    assert_eq!(z.device(), Device::Cpu);
    assert_eq!(
        (z.rank(), z.numel(), z.num_rows(), z.row_len()),
        (2, 6, 2, 3)
    );
    assert_eq!(z.to_vec::<f32>().unwrap(), [0.0; 6]);

    let f = Tensor::full_f32(1.5, [4], Device::Cpu).unwrap();
    assert_eq!(f.to_vec::<f32>().unwrap(), [1.5; 4]);

    let u = Tensor::from_slice(&[1u32, 2, 3], [3]).unwrap();
    assert_eq!(u.dtype(), DType::U32);
    assert_eq!(u.as_slice::<u32>().unwrap(), &[1, 2, 3]);

    let s = Tensor::scalar(-2i32);
    assert_eq!(s.shape(), Shape::scalar());
    assert_eq!(s.to_vec::<i32>().unwrap(), [-2]);

    let empty = Tensor::zeros([0, 5], DType::F32, Device::Cpu).unwrap();
    assert_eq!(empty.numel(), 0);
    assert!(empty.as_slice::<f32>().unwrap().is_empty());
    assert!(format!("{z:?}").contains("[2, 3]"));
}

#[test]
fn constructor_errors() {
    let err = Tensor::from_vec(vec![1.0f32; 5], [2, 3]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "from_vec: 5 elements given for shape [2, 3] (6 elements)"
    );
    let err = Tensor::from_slice(&[1u32; 7], [2, 3]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "from_slice: 7 elements given for shape [2, 3] (6 elements)"
    );
    // With the `cuda` feature this depends on the machine
    // (tests/cuda_backend.rs checks both cases).
    #[cfg(not(feature = "cuda"))]
    {
        let err = Tensor::zeros([2], DType::F32, Device::Cuda(0)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "device cuda:0 is unavailable: sheaf-tensor was built without the `cuda` feature"
        );
    }
    let err = Tensor::zeros([usize::MAX, 3], DType::F32, Device::Cpu).unwrap_err();
    assert!(matches!(err, TensorError::SizeOverflow { .. }), "{err}");
    // Element count fits, bytes do not.
    let err = Tensor::zeros([usize::MAX / 2], DType::F32, Device::Cpu).unwrap_err();
    assert!(matches!(err, TensorError::SizeOverflow { .. }), "{err}");
}

#[test]
fn huge_allocation_is_an_error_not_an_abort() {
    let numel = usize::MAX / 8; // f32: about usize::MAX / 2 bytes
    let bytes = numel * 4;
    let err = Tensor::zeros([numel], DType::F32, Device::Cpu).unwrap_err();
    assert_eq!(err, TensorError::AllocFailed { bytes });
    assert_eq!(err.to_string(), format!("failed to allocate {bytes} bytes"));
    // Large but addressable: the allocator refuses (no overcommit of 2^50 bytes).
    let err = Tensor::zeros([1usize << 48], DType::F32, Device::Cpu).unwrap_err();
    assert_eq!(err, TensorError::AllocFailed { bytes: 1 << 50 });
}

#[test]
fn host_storage_is_64_byte_aligned() {
    assert_eq!(HOST_ALIGN, 64);
    for n in [0, 1, 3, 16, 17, 1000] {
        let t = Tensor::zeros([n], DType::F32, Device::Cpu).unwrap();
        assert_eq!(
            t.as_slice::<f32>().unwrap().as_ptr() as usize % 64,
            0,
            "zeros({n})"
        );
        let t = Tensor::from_vec(vec![1u32; n], [n]).unwrap();
        assert_eq!(
            t.as_slice::<u32>().unwrap().as_ptr() as usize % 64,
            0,
            "from_vec({n})"
        );
    }
    let s = Tensor::scalar(1.0f32);
    assert_eq!(s.as_slice::<f32>().unwrap().as_ptr() as usize % 64, 0);
    // A row view starts where its row starts: aligned when the row width is
    // a multiple of 16 floats.
    let t = Tensor::zeros([4, 16], DType::F32, Device::Cpu).unwrap();
    let v = t.rows(2..3).unwrap();
    assert_eq!(v.as_slice::<f32>().unwrap().as_ptr() as usize % 64, 0);
}

#[test]
fn views_share_storage_without_copying() {
    let t = iota([4, 2, 3]);
    let id = t.storage_id();
    let base = t.as_slice::<f32>().unwrap().as_ptr() as usize;

    let mid = t.rows(1..3).unwrap();
    assert_eq!(mid.shape(), Shape::from([2, 2, 3]));
    assert_eq!(mid.storage_id(), id);
    assert!(mid.shares_storage(&t));
    assert_eq!(
        mid.as_slice::<f32>().unwrap().as_ptr() as usize,
        base + 6 * 4
    );
    assert_eq!(
        mid.to_vec::<f32>().unwrap(),
        (6..18).map(|i| i as f32).collect::<Vec<_>>()
    );

    let row = mid.row(1).unwrap();
    assert_eq!(row.shape(), Shape::from([2, 3]));
    assert_eq!(row.storage_id(), id);
    assert_eq!(
        row.to_vec::<f32>().unwrap(),
        (12..18).map(|i| i as f32).collect::<Vec<_>>()
    );

    let flat = row.reshape([6]).unwrap();
    assert_eq!(flat.storage_id(), id);
    let elem = flat.row(4).unwrap();
    assert_eq!(elem.shape(), Shape::scalar());
    assert_eq!(elem.to_vec::<f32>().unwrap(), [16.0]);

    let clone = t.clone();
    assert!(clone.shares_storage(&t));
    let all = t.rows(..).unwrap();
    assert_eq!(all.shape(), t.shape());
    assert_eq!(t.rows(..=1).unwrap().num_rows(), 2);
    assert_eq!(t.rows(3..).unwrap().num_rows(), 1);
    assert_eq!(t.rows(4..4).unwrap().num_rows(), 0);

    let deep = t.deep_clone().unwrap();
    assert!(!deep.shares_storage(&t));
    assert_eq!(deep.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
}

#[test]
fn view_errors() {
    let t = iota([3, 2]);
    let err = t.rows(2..5).unwrap_err();
    assert_eq!(
        err.to_string(),
        "rows: rows 2..5 of `self` are out of range (3 rows)"
    );
    #[allow(clippy::reversed_empty_ranges)] // a reversed range is an error, not empty
    let err = t.rows(2..1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "rows: rows 2..1 of `self` are out of range (3 rows)"
    );
    let err = t.row(3).unwrap_err();
    assert_eq!(
        err.to_string(),
        "row: rows 3..4 of `self` are out of range (3 rows)"
    );
    let err = t.row(usize::MAX).unwrap_err();
    assert!(matches!(err, TensorError::OutOfRange { .. }));
    let err = Tensor::scalar(1.0f32).rows(0..1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "rows: argument `self` must have rank at least 1, got shape []"
    );
    let err = t.reshape([4, 2]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "reshape: cannot view [3, 2] (6 elements) as [4, 2] (8 elements)"
    );
    let err = t.reshape([usize::MAX, 2]).unwrap_err();
    assert!(matches!(err, TensorError::SizeOverflow { .. }));
    let err = t.as_slice::<u32>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "as_slice: argument `self` has dtype f32, expected u32"
    );
}

#[test]
fn writing_a_shared_tensor_copies_it_first() {
    let original = iota([3, 2]);
    let mut writer = original.clone();
    assert!(writer.shares_storage(&original));
    writer.as_mut_slice::<f32>().unwrap()[0] = 100.0;
    assert!(!writer.shares_storage(&original));
    assert_eq!(original.to_vec::<f32>().unwrap()[0], 0.0);
    assert_eq!(writer.to_vec::<f32>().unwrap()[0], 100.0);

    // Now unique: further writes stay in place.
    let id = writer.storage_id();
    writer.as_mut_slice::<f32>().unwrap()[1] = 200.0;
    assert_eq!(writer.storage_id(), id);

    // A view copies only its own rows.
    let mut view = original.rows(1..2).unwrap();
    view.view_mut()
        .unwrap()
        .as_mut_slice::<f32>()
        .unwrap()
        .fill(-1.0);
    assert_eq!(view.to_vec::<f32>().unwrap(), [-1.0, -1.0]);
    assert_eq!(
        original.to_vec::<f32>().unwrap(),
        [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    );
    assert_eq!(view.deep_clone().unwrap().numel(), 2);
}

#[test]
fn a_unique_view_is_written_in_place() {
    let parent = iota([4, 2]);
    let mut view = parent.rows(2..4).unwrap();
    drop(parent);
    let id = view.storage_id();
    view.as_mut_slice::<f32>().unwrap()[0] = 9.0;
    assert_eq!(view.storage_id(), id);
    assert_eq!(view.to_vec::<f32>().unwrap(), [9.0, 5.0, 6.0, 7.0]);
}

#[test]
fn tensor_mut_rows_and_splits_write_into_one_buffer() {
    let mut buf = Tensor::zeros([5, 2], DType::F32, Device::Cpu).unwrap();
    let id = buf.storage_id();
    {
        let mut all = buf.view_mut().unwrap();
        assert_eq!(all.shape(), Shape::from([5, 2]));
        assert_eq!((all.num_rows(), all.row_len(), all.numel()), (5, 2, 10));
        assert_eq!(all.dtype(), DType::F32);
        assert_eq!(all.device(), Device::Cpu);
        all.rows_mut(1..2)
            .unwrap()
            .as_mut_slice::<f32>()
            .unwrap()
            .fill(1.0);
        let (mut head, tail) = all.split_rows_mut(3).unwrap();
        assert_eq!((head.num_rows(), tail.num_rows()), (3, 2));
        head.rows_mut(0..1)
            .unwrap()
            .as_mut_slice::<f32>()
            .unwrap()
            .fill(2.0);
        let (mut t0, t1) = tail.into_split_rows(1).unwrap();
        t0.as_mut_slice::<f32>().unwrap().fill(3.0);
        t1.into_mut_slice::<f32>().unwrap().fill(4.0);
    }
    assert_eq!(buf.storage_id(), id);
    assert_eq!(
        buf.to_vec::<f32>().unwrap(),
        [2.0, 2.0, 1.0, 1.0, 0.0, 0.0, 3.0, 3.0, 4.0, 4.0]
    );

    let mut v = buf.view_mut().unwrap();
    let err = v.rows_mut(4..6).unwrap_err();
    assert_eq!(
        err.to_string(),
        "rows_mut: rows 4..6 of `self` are out of range (5 rows)"
    );
    let err = v.split_rows_mut(6).unwrap_err();
    assert_eq!(
        err.to_string(),
        "split_rows_mut: rows 0..6 of `self` are out of range (5 rows)"
    );
    let err = v.as_slice::<i32>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "as_slice: argument `self` has dtype f32, expected i32"
    );
    let flat = v.reborrow().reshape([10]).unwrap();
    assert_eq!(flat.shape(), Shape::from([10]));
    let err = v.reborrow().reshape([3, 3]).unwrap_err();
    assert!(matches!(err, TensorError::ReshapeSize { .. }));
    let tail = v.into_rows_mut(3..).unwrap();
    assert_eq!(tail.as_slice::<f32>().unwrap(), &[3.0, 3.0, 4.0, 4.0]);
}

#[test]
fn view_mut_of_a_shared_tensor_does_not_touch_the_other() {
    let a = iota([2, 2]);
    let mut b = a.clone();
    b.view_mut()
        .unwrap()
        .rows_mut(0..1)
        .unwrap()
        .as_mut_slice::<f32>()
        .unwrap()[0] = 7.0;
    assert_eq!(a.to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 3.0]);
    assert_eq!(b.to_vec::<f32>().unwrap(), [7.0, 1.0, 2.0, 3.0]);
}

#[test]
fn index_conversion() {
    let i = Tensor::from_vec(vec![3i32, 0, 2], [3]).unwrap();
    let u = i.to_indices().unwrap();
    assert_eq!(u.dtype(), DType::U32);
    assert_eq!(u.to_vec::<u32>().unwrap(), [3, 0, 2]);
    let again = u.to_indices().unwrap();
    assert!(again.shares_storage(&u));
    let err = Tensor::from_vec(vec![1i32, -4], [2])
        .unwrap()
        .to_indices()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "to_indices: index -4 at position 1 is negative"
    );
    let err = Tensor::scalar(1.0f32).to_indices().unwrap_err();
    assert_eq!(
        err.to_string(),
        "to_indices: argument `self` has dtype f32, expected u32"
    );
}

fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 1..=4)
}

proptest! {
    #[test]
    fn row_views_match_slices(dims in shape_strategy(), a in 0usize..6, b in 0usize..6) {
        let t = iota(Shape::new(&dims).unwrap());
        let all = t.to_vec::<f32>().unwrap();
        let (start, end) = (a.min(b), a.max(b));
        let r = t.row_len();
        match t.rows(start..end) {
            Ok(v) => {
                prop_assert!(end <= t.num_rows());
                prop_assert!(v.shares_storage(&t));
                prop_assert_eq!(v.shape().rows(), end - start);
                prop_assert_eq!(v.shape().row_shape(), t.shape().row_shape());
                prop_assert_eq!(v.to_vec::<f32>().unwrap(), &all[start * r..end * r]);
                // A view of a view is a view of the original.
                if end > start {
                    let last = v.row(end - start - 1).unwrap();
                    let off = (end - 1) * r;
                    prop_assert_eq!(last.to_vec::<f32>().unwrap(), &all[off..off + r]);
                }
            }
            Err(e) => {
                prop_assert!(end > t.num_rows());
                let is_out_of_range = matches!(e, TensorError::OutOfRange { .. });
                prop_assert!(is_out_of_range);
            }
        }
    }

    #[test]
    fn reshape_keeps_elements(dims in shape_strategy(), to in shape_strategy()) {
        let t = iota(Shape::new(&dims).unwrap());
        let to = Shape::new(&to).unwrap();
        match t.reshape(to) {
            Ok(v) => {
                prop_assert_eq!(to.numel().unwrap(), t.numel());
                prop_assert_eq!(v.shape(), to);
                prop_assert!(v.shares_storage(&t));
                prop_assert_eq!(v.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
            }
            Err(e) => {
                prop_assert_ne!(to.numel().unwrap(), t.numel());
                let is_reshape = matches!(e, TensorError::ReshapeSize { .. });
                prop_assert!(is_reshape);
            }
        }
    }

    #[test]
    fn mutable_splits_partition_the_buffer(rows in 0usize..6, cols in 0usize..4, at in 0usize..7) {
        let mut t = Tensor::zeros([rows, cols], DType::F32, Device::Cpu).unwrap();
        match t.view_mut().unwrap().into_split_rows(at) {
            Ok((head, tail)) => {
                prop_assert!(at <= rows);
                head.into_mut_slice::<f32>().unwrap().fill(1.0);
                tail.into_mut_slice::<f32>().unwrap().fill(2.0);
            }
            Err(_) => prop_assert!(at > rows),
        }
        if at <= rows {
            let want: Vec<f32> = (0..rows * cols)
                .map(|i| if i < at * cols { 1.0 } else { 2.0 })
                .collect();
            prop_assert_eq!(t.to_vec::<f32>().unwrap(), want);
        }
    }
}

#[test]
fn recycle_reuses_unique_storage_zeroed() {
    let t = iota([4, 8]);
    let id = t.storage_id();
    assert!(t.is_unique());
    assert_eq!(t.capacity(), 32);
    let r = t
        .recycle([3, 5], DType::F32)
        .expect("unique and large enough");
    assert_eq!(r.storage_id(), id, "same storage, no allocation");
    assert_eq!(r.shape(), Shape::from([3, 5]));
    assert_eq!(r.offset(), 0);
    assert!(r.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
    // Another dtype of the same width reuses it as well.
    let u = r.recycle([32], DType::U32).expect("same bytes");
    assert!(u.to_vec::<u32>().unwrap().iter().all(|&v| v == 0));
}

#[test]
fn recycle_refuses_shared_small_or_invalid() {
    let t = iota([4, 8]);
    let view = t.rows(1..2).unwrap();
    assert!(!t.is_unique() && !view.is_unique());
    let t = t.recycle([2, 2], DType::F32).expect_err("a view exists");
    assert_eq!(
        view.to_vec::<f32>().unwrap(),
        (8..16).map(|v| v as f32).collect::<Vec<_>>()
    );
    drop(view);
    let t = t.recycle([5, 8], DType::F32).expect_err("too small");
    let t = t
        .recycle([usize::MAX, 2], DType::F32)
        .expect_err("invalid shape");
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        (0..32).map(|v| v as f32).collect::<Vec<_>>()
    );
}

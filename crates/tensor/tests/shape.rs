//! Shape, DType and Device: construction, arithmetic, printing, errors.

use proptest::prelude::*;
use sheaf_tensor::{DType, Device, Shape, TensorError};

#[test]
fn shapes_print_as_lists() {
    assert_eq!(Shape::from([2, 3]).to_string(), "[2, 3]");
    assert_eq!(Shape::from([7]).to_string(), "[7]");
    assert_eq!(Shape::scalar().to_string(), "[]");
    assert_eq!(format!("{:?}", Shape::from([1, 0, 4])), "[1, 0, 4]");
}

#[test]
fn construction_from_slices_arrays_and_vecs_agree() {
    let a = Shape::from([4, 5, 6]);
    let b = Shape::new(&[4, 5, 6]).unwrap();
    let c = Shape::try_from(vec![4, 5, 6]).unwrap();
    let d = Shape::try_from(&[4usize, 5, 6][..]).unwrap();
    assert_eq!(a, b);
    assert_eq!(a, c);
    assert_eq!(a, d);
    assert_eq!(a.dims(), &[4, 5, 6]);
    assert_eq!(a.rank(), 3);
    assert_eq!(Shape::from([]), Shape::scalar());
    assert_eq!(Shape::default(), Shape::scalar());
    let max = Shape::new(&[1, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(max.rank(), Shape::MAX_RANK);
}

#[test]
fn rank_above_six_is_an_error() {
    let err = Shape::new(&[1; 7]).unwrap_err();
    assert_eq!(err, TensorError::RankTooLarge { rank: 7 });
    assert_eq!(err.to_string(), "shapes have at most 6 dimensions, got 7");
    let err = Shape::stack(2, Shape::from([1, 1, 1, 1, 1, 1])).unwrap_err();
    assert_eq!(err, TensorError::RankTooLarge { rank: 7 });
}

#[test]
fn shape_is_small_and_copy() {
    fn is_copy<T: Copy>() {}
    is_copy::<Shape>();
    assert!(std::mem::size_of::<Shape>() <= 64);
}

#[test]
fn numel_rows_and_row_len() {
    let s = Shape::from([3, 4, 5]);
    assert_eq!(s.numel().unwrap(), 60);
    assert_eq!(s.rows(), 3);
    assert_eq!(s.row_len().unwrap(), 20);
    assert_eq!(s.row_shape(), Shape::from([4, 5]));
    assert_eq!(s.last_dim(), Some(5));
    assert_eq!(s.without_last(), Shape::from([3, 4]));
    assert_eq!(s.with_rows(7), Shape::from([7, 4, 5]));
    assert_eq!(s.dim(1), Some(4));
    assert_eq!(s.dim(3), None);

    let v = Shape::from([9]);
    assert_eq!((v.rows(), v.row_len().unwrap()), (9, 1));
    assert_eq!(v.row_shape(), Shape::scalar());

    let scalar = Shape::scalar();
    assert_eq!(scalar.numel().unwrap(), 1);
    assert_eq!((scalar.rows(), scalar.row_len().unwrap()), (1, 1));
    assert_eq!(scalar.row_shape(), Shape::scalar());
    assert_eq!(scalar.without_last(), Shape::scalar());
    assert_eq!(scalar.with_rows(3), Shape::from([3]));
    assert_eq!(scalar.last_dim(), None);

    assert_eq!(
        Shape::stack(5, Shape::from([2, 3])).unwrap(),
        Shape::from([5, 2, 3])
    );
    assert_eq!(Shape::stack(5, Shape::scalar()).unwrap(), Shape::from([5]));
}

#[test]
fn numel_overflow_is_an_error_but_zero_dims_win() {
    let big = Shape::from([usize::MAX, 2]);
    let err = big.numel().unwrap_err();
    assert_eq!(err, TensorError::SizeOverflow { shape: big });
    assert_eq!(
        err.to_string(),
        format!("shape [{}, 2] has too many elements to address", usize::MAX)
    );
    assert!(Shape::from([2, usize::MAX, usize::MAX]).row_len().is_err());
    assert_eq!(Shape::from([usize::MAX, usize::MAX, 0]).numel().unwrap(), 0);
    assert_eq!(Shape::from([0, usize::MAX, usize::MAX]).numel().unwrap(), 0);
}

#[test]
fn equal_shapes_hash_equal() {
    use std::collections::HashSet;
    let set: HashSet<Shape> = [
        Shape::from([2, 3]),
        Shape::new(&[2, 3]).unwrap(),
        Shape::from([2, 3, 4]).without_last(),
    ]
    .into_iter()
    .collect();
    assert_eq!(set.len(), 1);
    assert_ne!(Shape::from([2, 3]), Shape::from([2, 3, 0]));
}

#[test]
fn dtypes() {
    assert_eq!(DType::F32.size_in_bytes(), 4);
    assert_eq!(DType::I32.size_in_bytes(), 4);
    assert_eq!(DType::U32.size_in_bytes(), 4);
    let names: Vec<String> = DType::ALL.iter().map(|d| d.to_string()).collect();
    assert_eq!(names, ["f32", "i32", "u32"]);
    use sheaf_tensor::Element;
    assert_eq!(<f32 as Element>::DTYPE, DType::F32);
    assert_eq!(<i32 as Element>::DTYPE, DType::I32);
    assert_eq!(<u32 as Element>::DTYPE, DType::U32);
}

#[test]
fn devices() {
    assert_eq!(Device::Cpu.to_string(), "cpu");
    assert_eq!(Device::Cuda(1).to_string(), "cuda:1");
    assert_eq!(Device::default(), Device::Cpu);
    assert!(Device::Cpu.is_available());
    let backend = Device::Cpu.backend().unwrap();
    assert_eq!(backend.device(), Device::Cpu);
    assert!(backend.name().starts_with("cpu ("), "{}", backend.name());
    // With the `cuda` feature, availability depends on the machine
    // (tests/cuda_backend.rs checks both cases).
    #[cfg(not(feature = "cuda"))]
    {
        assert!(!Device::Cuda(0).is_available());
        let err = Device::Cuda(0).backend().unwrap_err();
        assert_eq!(
            err.to_string(),
            "device cuda:0 is unavailable: sheaf-tensor was built without the `cuda` feature"
        );
    }
}

proptest! {
    #[test]
    fn shape_arithmetic(dims in prop::collection::vec(0usize..6, 0..=6)) {
        let s = Shape::new(&dims).unwrap();
        prop_assert_eq!(s.dims(), &dims[..]);
        prop_assert_eq!(s.numel().unwrap(), dims.iter().product::<usize>());
        if !dims.is_empty() {
            prop_assert_eq!(s.rows() * s.row_len().unwrap(), s.numel().unwrap());
            prop_assert_eq!(s.row_shape().numel().unwrap(), s.row_len().unwrap());
            prop_assert_eq!(Shape::stack(s.rows(), s.row_shape()).unwrap(), s);
            prop_assert_eq!(
                s.without_last().numel().unwrap() * s.last_dim().unwrap(),
                s.numel().unwrap()
            );
        }
        let text = format!("{:?}", dims);
        prop_assert_eq!(s.to_string(), text);
    }
}

//! One numeric check per kernel family through the Backend, against plain
//! f64 references, on every ISA this CPU supports. (The kernel crate tests
//! the kernels in depth; these check the wiring: argument order, sizes,
//! overwrite vs accumulate.)

mod common;

use common::*;
use sheaf_tensor::prelude::*;
use sheaf_tensor::{Adagrad, Adam, Binary, DType, Device, Sgd, Tensor, Transpose, Unary};

#[test]
fn matmul_with_transposes_alpha_and_beta() {
    for b in backends() {
        // op(a) = a^T: a stored [3, 2] -> 2 x 3; op(b) = b^T: b stored [4, 3] -> 3 x 4.
        let (a, bm) = (rand([3, 2], 1), rand([4, 3], 2));
        let mut out = rand([2, 4], 3);
        let (av, bv, c0) = (f64s(&get(&a)), f64s(&get(&bm)), f64s(&get(&out)));
        b.matmul(
            &a,
            Transpose::Yes,
            &bm,
            Transpose::Yes,
            2.0,
            0.5,
            out.view_mut().unwrap(),
        )
        .unwrap();
        let mut want = vec![0.0; 8];
        for i in 0..2 {
            for j in 0..4 {
                let dot: f64 = (0..3).map(|p| av[p * 2 + i] * bv[j * 3 + p]).sum();
                want[i * 4 + j] = 2.0 * dot + 0.5 * c0[i * 4 + j];
            }
        }
        close(&get(&out), &want, 1e-5);

        // beta = 0 ignores NaN in the output; k = 0 gives zeros.
        let mut out = Tensor::full_f32(f32::NAN, [2, 4], Device::Cpu).unwrap();
        b.matmul(
            &rand([2, 3], 4),
            Transpose::No,
            &rand([3, 4], 5),
            Transpose::No,
            1.0,
            0.0,
            out.view_mut().unwrap(),
        )
        .unwrap();
        assert!(get(&out).iter().all(|v| v.is_finite()));
        let mut out = Tensor::full_f32(3.0, [2, 4], Device::Cpu).unwrap();
        b.matmul(
            &rand([2, 0], 4),
            Transpose::No,
            &rand([0, 4], 5),
            Transpose::No,
            1.0,
            0.5,
            out.view_mut().unwrap(),
        )
        .unwrap();
        assert_eq!(get(&out), [1.5; 8]);
    }
}

#[test]
fn elementwise_forward_backward_and_updates() {
    for b in backends() {
        let x = t(&[0.5, -1.0, 2.0, 0.25], [2, 2]);
        let y0 = t(&[1.5, 2.0, -0.5, 4.0], [2, 2]);
        for op in Unary::ALL {
            let f = |v: f64| match op {
                Unary::Tanh => v.tanh(),
                Unary::Sigmoid => sig(v),
                Unary::Relu => v.max(0.0),
                Unary::Exp => v.exp(),
                Unary::Log => v.ln(),
            };
            let pos = t(&[0.5, 1.0, 2.0, 0.25], [2, 2]); // log needs x > 0
            let x = if op == Unary::Log { &pos } else { &x };
            let want: Vec<f64> = f64s(&get(x)).into_iter().map(f).collect();
            let mut y = Tensor::zeros([2, 2], DType::F32, Device::Cpu).unwrap();
            b.unary(op, x, y.view_mut().unwrap()).unwrap();
            close(&get(&y), &want, 1e-5);
            let mut z = x.clone();
            b.unary_inplace(op, z.view_mut().unwrap()).unwrap();
            close(&get(&z), &want, 1e-5);
            assert_ne!(
                get(&z),
                get(x),
                "{op} in place must not write through to a shared tensor"
            );

            // dx += dy * f'(x), starting from dx = 1.
            let dy = t(&[1.0, -2.0, 0.5, 3.0], [2, 2]);
            let mut dx = Tensor::full_f32(1.0, [2, 2], Device::Cpu).unwrap();
            b.unary_bwd(op, x, &y, &dy, dx.view_mut().unwrap()).unwrap();
            let want: Vec<f64> = f64s(&get(x))
                .iter()
                .zip(f64s(&get(&dy)))
                .map(|(&v, g)| {
                    let d = match op {
                        Unary::Tanh => 1.0 - v.tanh().powi(2),
                        Unary::Sigmoid => sig(v) * (1.0 - sig(v)),
                        Unary::Relu => f64::from(u8::from(v > 0.0)),
                        Unary::Exp => v.exp(),
                        Unary::Log => 1.0 / v,
                    };
                    1.0 + g * d
                })
                .collect();
            close(&get(&dx), &want, 1e-5);
        }

        for op in Binary::ALL {
            let mut y = Tensor::zeros([2, 2], DType::F32, Device::Cpu).unwrap();
            b.binary(op, &x, &y0, y.view_mut().unwrap()).unwrap();
            let want: Vec<f64> = f64s(&get(&x))
                .iter()
                .zip(f64s(&get(&y0)))
                .map(|(&p, q)| match op {
                    Binary::Add => p + q,
                    Binary::Sub => p - q,
                    Binary::Mul => p * q,
                    Binary::Div => p / q,
                })
                .collect();
            close(&get(&y), &want, 1e-6);
        }

        let (xs, ys) = (f64s(&get(&x)), f64s(&get(&y0)));
        let mut y = y0.clone();
        b.scale(3.0, &x, y.view_mut().unwrap()).unwrap();
        close(
            &get(&y),
            &xs.iter().map(|v| 3.0 * v).collect::<Vec<_>>(),
            1e-6,
        );
        let mut y = y0.clone();
        b.axpy(-2.0, &x, y.view_mut().unwrap()).unwrap();
        close(
            &get(&y),
            &xs.iter()
                .zip(&ys)
                .map(|(p, q)| q - 2.0 * p)
                .collect::<Vec<_>>(),
            1e-6,
        );
        let mut y = y0.clone();
        b.mul_acc(&x, &x, y.view_mut().unwrap()).unwrap();
        close(
            &get(&y),
            &xs.iter()
                .zip(&ys)
                .map(|(p, q)| q + p * p)
                .collect::<Vec<_>>(),
            1e-6,
        );
        assert_eq!(get(&y0), [1.5, 2.0, -0.5, 4.0], "inputs are untouched");

        let dy = t(&[1.0, 2.0, 3.0, 4.0], [2, 2]);
        let mut da = Tensor::full_f32(1.0, [2, 2], Device::Cpu).unwrap();
        let mut db = Tensor::full_f32(1.0, [2, 2], Device::Cpu).unwrap();
        b.div_bwd(&x, &y0, &dy, da.view_mut().unwrap(), db.view_mut().unwrap())
            .unwrap();
        let g = f64s(&get(&dy));
        let want_da: Vec<f64> = (0..4).map(|i| 1.0 + g[i] / ys[i]).collect();
        let want_db: Vec<f64> = (0..4)
            .map(|i| 1.0 - g[i] * xs[i] / (ys[i] * ys[i]))
            .collect();
        close(&get(&da), &want_da, 1e-6);
        close(&get(&db), &want_db, 1e-6);

        let mut z = y0.clone();
        b.fill(7.0, z.view_mut().unwrap()).unwrap();
        assert_eq!(get(&z), [7.0; 4]);
    }
}

#[test]
fn rows_gather_scatter_copy_broadcast() {
    for b in backends() {
        let table = rand([5, 3], 7);
        let tv = get(&table);
        let idx = Tensor::from_slice(&[4u32, 0, 4], [3]).unwrap();

        let mut g = Tensor::zeros([3, 3], DType::F32, Device::Cpu).unwrap();
        b.gather_rows(&table, &idx, g.view_mut().unwrap()).unwrap();
        let want: Vec<f32> = [4, 0, 4]
            .iter()
            .flat_map(|&r| tv[r * 3..r * 3 + 3].to_vec())
            .collect();
        assert_eq!(get(&g), want);

        let mut acc = Tensor::full_f32(1.0, [5, 3], Device::Cpu).unwrap();
        let src = rand([3, 3], 8);
        let sv = get(&src);
        b.scatter_add_rows(&src, &idx, acc.view_mut().unwrap())
            .unwrap();
        let mut want = vec![1.0f64; 15];
        for (i, &r) in [4usize, 0, 4].iter().enumerate() {
            for c in 0..3 {
                want[r * 3 + c] += sv[i * 3 + c] as f64;
            }
        }
        close(&get(&acc), &want, 1e-6);

        // Batch results written into a row range of a larger buffer.
        let mut buf = Tensor::zeros([6, 3], DType::F32, Device::Cpu).unwrap();
        let id = buf.storage_id();
        {
            let mut view = buf.view_mut().unwrap();
            b.copy_rows(&table, 1, view.rows_mut(2..6).unwrap(), 1, 2)
                .unwrap();
            b.broadcast_row(&t(&[9.0, 8.0, 7.0], [3]), view.rows_mut(0..2).unwrap())
                .unwrap();
        }
        assert_eq!(buf.storage_id(), id);
        let bv = get(&buf);
        assert_eq!(&bv[..6], &[9.0, 8.0, 7.0, 9.0, 8.0, 7.0]);
        assert_eq!(&bv[6..9], &[0.0; 3]);
        assert_eq!(&bv[9..15], &tv[3..9]);
        assert_eq!(&bv[15..], &[0.0; 3]);
    }
}

#[test]
fn column_blocks_and_row_scaling() {
    for b in backends() {
        // src [3, 4]: columns 1..3 into columns 2..4 of dst [3, 5].
        let src = rand([3, 4], 31);
        let sv = get(&src);
        let mut dst = t(&[1.0; 15], [3, 5]);
        b.copy_cols(&src, 1, dst.view_mut().unwrap(), 2, 2, false)
            .unwrap();
        let dv = get(&dst);
        for r in 0..3 {
            assert_eq!(&dv[r * 5..r * 5 + 2], &[1.0, 1.0]);
            assert_eq!(&dv[r * 5 + 2..r * 5 + 4], &sv[r * 4 + 1..r * 4 + 3]);
            assert_eq!(dv[r * 5 + 4], 1.0);
        }
        b.copy_cols(&src, 1, dst.view_mut().unwrap(), 2, 2, true)
            .unwrap();
        let dv2 = get(&dst);
        for r in 0..3 {
            for j in 0..2 {
                let expected = 2.0 * sv[r * 4 + 1 + j];
                assert!((dv2[r * 5 + 2 + j] - expected).abs() <= 1e-6 * expected.abs().max(1.0));
            }
        }
        // Out of range columns and mismatched rows are errors, not panics.
        let err = b.copy_cols(&src, 3, dst.view_mut().unwrap(), 0, 2, false);
        assert!(err
            .unwrap_err()
            .to_string()
            .contains("columns 3..5 of `src`"));
        let mut short = t(&[0.0; 10], [2, 5]);
        assert!(b
            .copy_cols(&src, 0, short.view_mut().unwrap(), 0, 1, false)
            .is_err());

        // y = s[r] x[r, :], then y += s[r] x[r, :].
        let x = rand([2, 3, 4], 32);
        let s = rand([2, 3], 33);
        let (xv, svals) = (get(&x), get(&s));
        let mut y = t(&[0.5; 24], [2, 3, 4]);
        b.scale_rows(&x, &s, y.view_mut().unwrap(), false).unwrap();
        let yv = get(&y);
        for i in 0..24 {
            assert_eq!(yv[i], svals[i / 4] * xv[i]);
        }
        b.scale_rows(&x, &s, y.view_mut().unwrap(), true).unwrap();
        let yv2 = get(&y);
        for i in 0..24 {
            assert_eq!(yv2[i], yv[i] + svals[i / 4] * xv[i]);
        }
        let bad = rand([3], 34);
        assert!(b
            .scale_rows(&x, &bad, y.view_mut().unwrap(), false)
            .is_err());
    }
}

fn softmax_ref(x: &[f64]) -> Vec<f64> {
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = x.iter().map(|v| (v - m).exp()).sum();
    x.iter().map(|v| (v - m).exp() / s).collect()
}

#[test]
fn softmax_losses_and_sums() {
    for b in backends() {
        // A rank-3 input: softmax over the last dimension of [2, 2, 3].
        let x = rand([2, 2, 3], 11);
        let xv = f64s(&get(&x));
        let p: Vec<f64> = xv.chunks(3).flat_map(softmax_ref).collect();
        let mut y = Tensor::zeros([2, 2, 3], DType::F32, Device::Cpu).unwrap();
        b.softmax_rows(&x, y.view_mut().unwrap()).unwrap();
        close(&get(&y), &p, 1e-5);
        let mut ly = Tensor::zeros([2, 2, 3], DType::F32, Device::Cpu).unwrap();
        b.log_softmax_rows(&x, ly.view_mut().unwrap()).unwrap();
        close(
            &get(&ly),
            &p.iter().map(|v| v.ln()).collect::<Vec<_>>(),
            1e-5,
        );

        let dy = rand([2, 2, 3], 12);
        let g = f64s(&get(&dy));
        let mut dx = Tensor::full_f32(1.0, [2, 2, 3], Device::Cpu).unwrap();
        b.softmax_rows_bwd(&y, &dy, dx.view_mut().unwrap()).unwrap();
        let mut want = vec![0.0; 12];
        for r in 0..4 {
            let dot: f64 = (0..3).map(|c| g[r * 3 + c] * p[r * 3 + c]).sum();
            for c in 0..3 {
                want[r * 3 + c] = 1.0 + p[r * 3 + c] * (g[r * 3 + c] - dot);
            }
        }
        close(&get(&dx), &want, 1e-5);
        let mut dx = Tensor::full_f32(1.0, [2, 2, 3], Device::Cpu).unwrap();
        b.log_softmax_rows_bwd(&ly, &dy, dx.view_mut().unwrap())
            .unwrap();
        for r in 0..4 {
            let s: f64 = (0..3).map(|c| g[r * 3 + c]).sum();
            for c in 0..3 {
                want[r * 3 + c] = 1.0 + g[r * 3 + c] - p[r * 3 + c] * s;
            }
        }
        close(&get(&dx), &want, 1e-5);

        let x2 = x.reshape([4, 3]).unwrap();
        let labels = Tensor::from_slice(&[2u32, 0, 1, 1], [4]).unwrap();
        let mut probs = Tensor::zeros([4, 3], DType::F32, Device::Cpu).unwrap();
        let mut loss = Tensor::zeros([4], DType::F32, Device::Cpu).unwrap();
        b.nll_log_softmax(
            &x2,
            &labels,
            probs.view_mut().unwrap(),
            loss.view_mut().unwrap(),
        )
        .unwrap();
        close(&get(&probs), &p, 1e-5);
        let lab = [2usize, 0, 1, 1];
        let want_loss: Vec<f64> = (0..4).map(|r| -p[r * 3 + lab[r]].ln()).collect();
        close(&get(&loss), &want_loss, 1e-5);
        let dloss = t(&[1.0, 0.5, -1.0, 2.0], [4]);
        let mut dx = Tensor::full_f32(1.0, [4, 3], Device::Cpu).unwrap();
        b.nll_log_softmax_bwd(&probs, &labels, &dloss, dx.view_mut().unwrap())
            .unwrap();
        let dl = [1.0, 0.5, -1.0, 2.0];
        for r in 0..4 {
            for c in 0..3 {
                let onehot = f64::from(u8::from(c == lab[r]));
                want[r * 3 + c] = 1.0 + dl[r] * (p[r * 3 + c] - onehot);
            }
        }
        close(&get(&dx), &want, 1e-5);

        let mut rs = Tensor::full_f32(9.0, [2, 2], Device::Cpu).unwrap();
        b.row_sums(&x, rs.view_mut().unwrap()).unwrap();
        let want_rs: Vec<f64> = xv.chunks(3).map(|r| r.iter().sum()).collect();
        close(&get(&rs), &want_rs, 1e-5);
        let mut cs = Tensor::full_f32(1.0, [3], Device::Cpu).unwrap();
        b.col_sums_acc(&x, cs.view_mut().unwrap()).unwrap();
        let want_cs: Vec<f64> = (0..3)
            .map(|c| 1.0 + (0..4).map(|r| xv[r * 3 + c]).sum::<f64>())
            .collect();
        close(&get(&cs), &want_cs, 1e-5);
    }
}

#[test]
fn optimizer_steps_dense_and_sparse() {
    for b in backends() {
        let p0 = rand([2, 3], 41);
        let g = rand([2, 3], 42);
        let (pv, gv) = (f64s(&get(&p0)), f64s(&get(&g)));

        // SGD with momentum and weight decay, two steps.
        let cfg = Sgd {
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 0.01,
        };
        let (mut p, mut vel) = (p0.clone(), zeros([2, 3]));
        for _ in 0..2 {
            b.sgd_step(
                &cfg,
                p.view_mut().unwrap(),
                &g,
                Some(vel.view_mut().unwrap()),
            )
            .unwrap();
        }
        let (mut rp, mut rv) = (pv.clone(), vec![0.0; 6]);
        for _ in 0..2 {
            for i in 0..6 {
                let gi = gv[i] + 0.01 * rp[i];
                rv[i] = 0.9 * rv[i] + gi;
                rp[i] -= 0.1 * rv[i];
            }
        }
        close(&get(&p), &rp, 1e-5);
        close(&get(&vel), &rv, 1e-5);
        assert_eq!(
            get(&p0),
            get(&rand([2, 3], 41)),
            "the shared original is untouched"
        );

        // Adam, one step.
        let cfg = Adam {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        };
        let (mut p, mut m, mut v) = (p0.clone(), zeros([2, 3]), zeros([2, 3]));
        b.adam_step(
            &cfg,
            1,
            p.view_mut().unwrap(),
            &g,
            m.view_mut().unwrap(),
            v.view_mut().unwrap(),
        )
        .unwrap();
        let want: Vec<f64> = (0..6)
            .map(|i| {
                let (mh, vh) = (gv[i], gv[i] * gv[i]); // bias-corrected moments after step 1
                pv[i] - 0.01 * mh / (vh.sqrt() + 1e-8)
            })
            .collect();
        close(&get(&p), &want, 1e-4);

        // Sparse Adagrad on rows 2 and 0 of a [4, 3] table.
        let cfg = Adagrad {
            lr: 0.5,
            eps: 1e-10,
            weight_decay: 0.0,
        };
        let table0 = rand([4, 3], 43);
        let tv = f64s(&get(&table0));
        let (mut table, mut acc) = (
            table0.clone(),
            Tensor::full_f32(0.1, [4, 3], Device::Cpu).unwrap(),
        );
        b.adagrad_step_rows(
            &cfg,
            table.view_mut().unwrap(),
            &[2, 0],
            &g,
            acc.view_mut().unwrap(),
        )
        .unwrap();
        let mut want_t = tv.clone();
        let mut want_a = vec![0.1f64; 12];
        for (i, &r) in [2usize, 0].iter().enumerate() {
            for c in 0..3 {
                let gi = gv[i * 3 + c];
                want_a[r * 3 + c] = 0.1f32 as f64 + gi * gi;
                want_t[r * 3 + c] -= 0.5 * gi / (want_a[r * 3 + c].sqrt() + 1e-10);
            }
        }
        close(&get(&table), &want_t, 1e-5);
        close(&get(&acc), &want_a, 1e-5);
    }
}

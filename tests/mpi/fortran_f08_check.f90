! An unchanged Fortran MPI program (use mpi_f08) for the MPI door's tests
! (tests/test_mpi_fortran.sh), the twin of fortran_check.f90: each of the
! eleven blocking collectives the door serves, on MPI_COMM_WORLD, with
! INTEGER and DOUBLE PRECISION data; MPI_ALLREDUCE with MPI_SUM and
! MPI_MAX, in place and not; MPI_IN_PLACE also for MPI_REDUCE,
! MPI_ALLGATHER, MPI_GATHER, MPI_SCATTER and MPI_REDUCE_SCATTER_BLOCK.
! Each result is checked against what every rank can compute alone.
! ierror is optional in mpi_f08: MPI_BCAST, MPI_ALLTOALL and MPI_BARRIER
! are called without it, every other call with it, checked against
! MPI_SUCCESS. Rank 0 prints "fortran_f08_check: ok (K calls)", K being
! the number of collective calls each rank made (the test compares it
! with the door's count); a wrong value prints its place and ends the run
! with MPI_ABORT.
program fortran_f08_check
    use mpi_f08
    implicit none
    integer, parameter :: n = 1001, m = 2
    integer :: rank, nranks, ierr, calls, i, j, r, d, root, op, inplace, total
    integer :: ia(n), ib(n), iwant(n)
    double precision :: da(n), db(n)
    integer, allocatable :: big(:), out(:), counts(:), displs(:), rcounts(:), rdispls(:)

    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
    calls = 0

    ! MPI_ALLREDUCE: INTEGER and DOUBLE PRECISION, MPI_SUM and MPI_MAX,
    ! from a send buffer and in place.
    do op = 1, 2
        do i = 1, n
            iwant(i) = val(0, i)
            do r = 1, nranks - 1
                if (op == 1) then
                    iwant(i) = iwant(i) + val(r, i)
                else
                    iwant(i) = max(iwant(i), val(r, i))
                end if
            end do
        end do
        do inplace = 0, 1
            do i = 1, n
                ia(i) = val(rank, i)
                da(i) = dble(val(rank, i))
            end do
            if (inplace == 1) then
                ib = ia
                db = da
                call MPI_Allreduce(MPI_IN_PLACE, ib, n, MPI_INTEGER, pick(op), MPI_COMM_WORLD, ierr)
                call done(ierr)
                call MPI_Allreduce(MPI_IN_PLACE, db, n, MPI_DOUBLE_PRECISION, pick(op), &
                                   MPI_COMM_WORLD, ierr)
                call done(ierr)
            else
                call MPI_Allreduce(ia, ib, n, MPI_INTEGER, pick(op), MPI_COMM_WORLD, ierr)
                call done(ierr)
                call MPI_Allreduce(da, db, n, MPI_DOUBLE_PRECISION, pick(op), MPI_COMM_WORLD, ierr)
                call done(ierr)
            end if
            call expect_ints('allreduce integer', ib, iwant, n)
            call expect_doubles('allreduce double precision', db, iwant, n)
        end do
    end do

    ! MPI_REDUCE, MPI_SUM, from a send buffer to the last rank, and in
    ! place at rank 0 (MPICH 4.0 fails an in-place reduce of this size at
    ! another root, with or without the door).
    root = nranks - 1
    do i = 1, n
        iwant(i) = 0
        do r = 0, nranks - 1
            iwant(i) = iwant(i) + val(r, i)
        end do
        ia(i) = val(rank, i)
    end do
    ib = -7
    call MPI_Reduce(ia, ib, n, MPI_INTEGER, MPI_SUM, root, MPI_COMM_WORLD, ierr)
    call done(ierr)
    if (rank == root) call expect_ints('reduce', ib, iwant, n)
    ib = ia
    if (rank == 0) then
        call MPI_Reduce(MPI_IN_PLACE, ib, n, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
    else
        call MPI_Reduce(ib, ia, n, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
    end if
    call done(ierr)
    if (rank == 0) call expect_ints('reduce in place', ib, iwant, n)

    ! MPI_BCAST from every rank.
    do root = 0, nranks - 1
        do i = 1, n
            iwant(i) = val(root, i)
            if (rank == root) then
                da(i) = dble(val(root, i))
            else
                da(i) = -100d0
            end if
        end do
        call MPI_Bcast(da, n, MPI_DOUBLE_PRECISION, root, MPI_COMM_WORLD)
        call done(MPI_SUCCESS)
        call expect_doubles('bcast', da, iwant, n)
    end do

    ! MPI_ALLGATHER of m INTEGERs a rank, from a send buffer and in place.
    total = m * nranks
    allocate(big(total), out(total))
    do r = 0, nranks - 1
        do j = 1, m
            out(r * m + j) = val(r, j)
        end do
    end do
    do j = 1, m
        ia(j) = val(rank, j)
    end do
    big = -1
    call MPI_Allgather(ia, m, MPI_INTEGER, big, m, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    call done(ierr)
    call expect_ints('allgather', big, out, total)
    big = -1
    big(rank * m + 1:rank * m + m) = ia(1:m)
    call MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, big, m, MPI_INTEGER, &
                       MPI_COMM_WORLD, ierr)
    call done(ierr)
    call expect_ints('allgather in place', big, out, total)

    ! MPI_GATHER of m INTEGERs a rank to rank 0, from a send buffer and
    ! (at the root) in place.
    big = -1
    call MPI_Gather(ia, m, MPI_INTEGER, big, m, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
    call done(ierr)
    if (rank == 0) call expect_ints('gather', big, out, total)
    big = -1
    if (rank == 0) then
        big(1:m) = ia(1:m)
        call MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, big, m, MPI_INTEGER, 0, &
                        MPI_COMM_WORLD, ierr)
        call done(ierr)
        call expect_ints('gather in place', big, out, total)
    else
        call MPI_Gather(ia, m, MPI_INTEGER, big, m, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
        call done(ierr)
    end if

    ! MPI_SCATTER of m INTEGERs a rank from the last rank, to a receive
    ! buffer and (at the root) in place.
    root = nranks - 1
    ib = -1
    call MPI_Scatter(out, m, MPI_INTEGER, ib, m, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
    call done(ierr)
    call expect_ints('scatter', ib, out(rank * m + 1:), m)
    if (rank == root) then
        call MPI_Scatter(out, m, MPI_INTEGER, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, root, &
                         MPI_COMM_WORLD, ierr)
        call done(ierr)
    else
        ib = -1
        call MPI_Scatter(big, m, MPI_INTEGER, ib, m, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
        call done(ierr)
        call expect_ints('scatter in place', ib, out(rank * m + 1:), m)
    end if

    ! MPI_ALLTOALL of m INTEGERs a pair: rank r sends 100 r + 10 d + j to d.
    do d = 0, nranks - 1
        do j = 1, m
            big(d * m + j) = 100 * rank + 10 * d + j
            out(d * m + j) = 100 * d + 10 * rank + j
        end do
    end do
    ib = -1
    call MPI_Alltoall(big, m, MPI_INTEGER, ib, m, MPI_INTEGER, MPI_COMM_WORLD)
    call done(MPI_SUCCESS)
    call expect_ints('alltoall', ib, out, total)
    deallocate(big, out)

    ! MPI_ALLTOALLV: rank r sends d + 1 INTEGERs to rank d, and so
    ! receives r + 1 from each.
    allocate(counts(nranks), displs(nranks), rcounts(nranks), rdispls(nranks))
    allocate(big(nranks * (nranks + 1) / 2), out((rank + 1) * nranks))
    do d = 0, nranks - 1
        counts(d + 1) = d + 1
        displs(d + 1) = d * (d + 1) / 2
        rcounts(d + 1) = rank + 1
        rdispls(d + 1) = d * (rank + 1)
        do j = 1, d + 1
            big(displs(d + 1) + j) = 100 * rank + 10 * d + j
        end do
        do j = 1, rank + 1
            iwant(d * (rank + 1) + j) = 100 * d + 10 * rank + j
        end do
    end do
    out = -1
    call MPI_Alltoallv(big, counts, displs, MPI_INTEGER, out, rcounts, rdispls, MPI_INTEGER, &
                       MPI_COMM_WORLD, ierr)
    call done(ierr)
    call expect_ints('alltoallv', out, iwant, (rank + 1) * nranks)
    deallocate(big, out)

    ! MPI_REDUCE_SCATTER_BLOCK, MPI_SUM, m DOUBLE PRECISIONs a rank, from
    ! a send buffer and in place.
    total = m * nranks
    do i = 1, total
        da(i) = dble(val(rank, i))
    end do
    do j = 1, m
        iwant(j) = 0
        do r = 0, nranks - 1
            iwant(j) = iwant(j) + val(r, rank * m + j)
        end do
    end do
    db = -1d0
    call MPI_Reduce_scatter_block(da, db, m, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call done(ierr)
    call expect_doubles('reduce_scatter_block', db, iwant, m)
    call MPI_Reduce_scatter_block(MPI_IN_PLACE, da, m, MPI_DOUBLE_PRECISION, MPI_SUM, &
                                  MPI_COMM_WORLD, ierr)
    call done(ierr)
    call expect_doubles('reduce_scatter_block in place', da, iwant, m)

    ! MPI_REDUCE_SCATTER, MPI_MAX: rank d gets d + 1 INTEGERs.
    total = nranks * (nranks + 1) / 2
    do i = 1, total
        ia(i) = val(rank, i)
    end do
    do j = 1, rank + 1
        i = rank * (rank + 1) / 2 + j
        iwant(j) = val(0, i)
        do r = 1, nranks - 1
            iwant(j) = max(iwant(j), val(r, i))
        end do
    end do
    ib = -100
    call MPI_Reduce_scatter(ia, ib, counts, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
    call done(ierr)
    call expect_ints('reduce_scatter', ib, iwant, rank + 1)

    call MPI_Barrier(MPI_COMM_WORLD)
    call done(MPI_SUCCESS)

    if (rank == 0) print '(a, i0, a)', 'fortran_f08_check: ok (', calls, ' calls)'
    call MPI_Finalize(ierr)

contains

    ! Rank r's value at i: small, so sums stay exact in either type.
    integer function val(r, i)
        integer, intent(in) :: r, i
        val = mod(r * 7 + i * 3, 5) - 2
    end function val

    type(MPI_Op) function pick(op)
        integer, intent(in) :: op
        if (op == 1) then
            pick = MPI_SUM
        else
            pick = MPI_MAX
        end if
    end function pick

    ! One collective call made and returned MPI_SUCCESS.
    subroutine done(code)
        integer, intent(in) :: code
        calls = calls + 1
        if (code /= MPI_SUCCESS) then
            print '(a, i0, a, i0, a, i0)', 'fortran_f08_check: rank ', rank, ': call ', calls, &
                ' returned ', code
            call MPI_Abort(MPI_COMM_WORLD, 1)
        end if
    end subroutine done

    subroutine expect_ints(what, got, want, count)
        character(*), intent(in) :: what
        integer, intent(in) :: count, got(count), want(count)
        integer :: k
        do k = 1, count
            if (got(k) /= want(k)) call wrong(what, k)
        end do
    end subroutine expect_ints

    subroutine expect_doubles(what, got, want, count)
        character(*), intent(in) :: what
        integer, intent(in) :: count, want(count)
        double precision, intent(in) :: got(count)
        integer :: k
        do k = 1, count
            if (got(k) /= dble(want(k))) call wrong(what, k)
        end do
    end subroutine expect_doubles

    subroutine wrong(what, k)
        character(*), intent(in) :: what
        integer, intent(in) :: k
        print '(a, i0, a, a, a, i0)', 'fortran_f08_check: rank ', rank, ': ', what, ' wrong at ', k
        call MPI_Abort(MPI_COMM_WORLD, 1)
    end subroutine wrong

end program fortran_f08_check

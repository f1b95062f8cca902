-- TPC-H Q11, Important Stock Identification: the query text of the TPC-H specification (clause
-- 2.4.11) with its qualification parameters NATION = GERMANY, FRACTION = 0.0001 (the value for
-- scale factor 1, used at every scale, as DuckDB's tpch_queries() does: the specification
-- scales it as 0.0001 / SF, which only changes how many rows qualify).
select
    ps_partkey,
    sum(ps_supplycost * ps_availqty) as value
from
    partsupp,
    supplier,
    nation
where
    ps_suppkey = s_suppkey
    and s_nationkey = n_nationkey
    and n_name = 'GERMANY'
group by
    ps_partkey having
        sum(ps_supplycost * ps_availqty) > (
            select
                sum(ps_supplycost * ps_availqty) * 0.0001
            from
                partsupp,
                supplier,
                nation
            where
                ps_suppkey = s_suppkey
                and s_nationkey = n_nationkey
                and n_name = 'GERMANY'
        )
order by
    value desc;

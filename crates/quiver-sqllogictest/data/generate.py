"""Regenerates the small fixture files the .slt tests read (committed; run by hand when changed).

    python crates/quiver-sqllogictest/data/generate.py

Needs pyarrow and fastavro. The files are tiny and deterministic.
"""

import gzip
import json
import pathlib

import fastavro
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pyarrow.orc as orc
import pyarrow.parquet as pq

HERE = pathlib.Path(__file__).parent

people = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5], pa.int64()),
        "Name": pa.array(["alice", "bob", "carol", None, "eve"], pa.string()),
        "Score": pa.array([9.5, 7.25, None, 3.0, 8.0], pa.float64()),
        "city": pa.array(["Paris", "Berlin", "Paris", "Rome", "Berlin"], pa.string()),
    }
)


def main() -> None:
    pq.write_table(people, HERE / "people.parquet")
    (HERE / "parts").mkdir(exist_ok=True)
    pq.write_table(people.slice(0, 2), HERE / "parts" / "part-0.parquet")
    pq.write_table(people.slice(2, 3), HERE / "parts" / "part-1.parquet")
    pacsv.write_csv(people, HERE / "people.csv")
    with open(HERE / "people.csv", "rb") as f:
        data = f.read()
    with gzip.open(HERE / "people.csv.gz", "wb") as f:
        f.write(data)
    with pa.CompressedOutputStream(str(HERE / "people.csv.zst"), "zstd") as f:
        f.write(data)
    (HERE / "semicolon.csv").write_text("a;b\n1;x\n2;y\n")
    (HERE / "noheader.csv").write_text("1,x\n2,y\n3,z\n")
    (HERE / "people.tsv").write_text("id\tName\n1\talice\n2\tbob\n")
    rows = people.to_pylist()
    with open(HERE / "people.ndjson", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    with open(HERE / "people.json", "w") as f:
        json.dump(rows, f, indent=1)
    with gzip.open(HERE / "people.ndjson.gz", "wt") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    feather.write_feather(people, HERE / "people.arrow", compression="uncompressed")
    with ipc.new_stream(HERE / "people.arrows", people.schema) as w:
        w.write_table(people)
    orc.write_table(people, HERE / "people.orc")
    schema = {
        "type": "record",
        "name": "person",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "Name", "type": ["null", "string"]},
            {"name": "Score", "type": ["null", "double"]},
            {"name": "city", "type": "string"},
        ],
    }
    with open(HERE / "people.avro", "wb") as f:
        fastavro.writer(f, schema, rows)
    # Two columns differing only by case, for the ambiguity error.
    pq.write_table(pa.table({"UserID": [1], "userId": [2]}), HERE / "case_clash.parquet")
    # Malformed inputs.
    good = (HERE / "people.parquet").read_bytes()
    (HERE / "truncated.parquet").write_bytes(good[: len(good) // 2])
    (HERE / "not_parquet.parquet").write_text("this is not a parquet file\n")
    (HERE / "bad_rows.csv").write_text('a,b\n1,2\n3,4,5\n"unterminated,6\n')
    (HERE / "unknown.dat").write_text("a,b\n1,2\n")
    (HERE / "bad.ndjson").write_text('{"a": 1}\n{"a": 2,,}\n')


if __name__ == "__main__":
    main()
